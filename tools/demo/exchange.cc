#include "exchange.h"

#include <initializer_list>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "device_mem.h"
#include "net_client.h"

namespace zipccl::demo {
namespace {

using client::PluginNet;

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

bool read_full(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

// One rank. Slot s of each arena holds message s % 32's payload; rank r's message payloads are
// generated once per slot from seed r + 1, so the receiver knows what to expect.
RankResult rank_main(const ExchangeConfig& cfg, int rank, int handle_out, int handle_in) {
  RankResult res;
  auto error = [&](const char* what, ncclResult_t r) {
    snprintf(res.error, sizeof res.error, "%s returned %d", what, int(r));
    return res;
  };
#define DEMO_CHECK(call)                              \
  do {                                                \
    ncclResult_t r_ = (call);                         \
    if (r_ != ncclSuccess) return error(#call, r_);   \
  } while (0)
  constexpr int kSlots = 32;
  const size_t m = cfg.msg_bytes;
  // Data first, pages touched, then connect: neither rank's clock starts while the other is
  // still generating.
  std::vector<char> sarena(kSlots * m), rarena(kSlots * m, 0), expect(kSlots * m);
  for (int s = 0; s < kSlots; ++s) {
    client::fill(cfg.kind, uint64_t(rank + 1), uint64_t(s), 0, sarena.data() + s * m, m);
    client::fill(cfg.kind, uint64_t(2 - rank), uint64_t(s), 0, expect.data() + s * m, m);
  }
  // What the plugin is given: the host arenas, or pinned mapped copies of them.
  char* sbuf = sarena.data();
  char* rbuf = rarena.data();
  if (cfg.pinned) {
    sbuf = static_cast<char*>(client::host_alloc_mapped(sarena.size()));
    rbuf = static_cast<char*>(client::host_alloc_mapped(rarena.size()));
    memcpy(sbuf, sarena.data(), sarena.size());
    memset(rbuf, 0, rarena.size());
  }
  PluginNet net(cfg.plugin, cfg.version);
  DEMO_CHECK(net.init());
  unsigned char mine[NCCL_NET_HANDLE_MAXSIZE] = {}, theirs[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  DEMO_CHECK(net.listen(0, mine, &lc));
  if (write(handle_out, mine, sizeof mine) != ssize_t(sizeof mine) || !read_full(handle_in, theirs, sizeof theirs))
    return error("handle exchange", ncclSystemError);
  while (!sc || !rc) {
    if (!sc) DEMO_CHECK(net.connect(0, theirs, &sc));
    if (!rc) DEMO_CHECK(net.accept(lc, &rc));
  }
  void *smh = nullptr, *rmh = nullptr;
  DEMO_CHECK(net.reg_mr(sc, sbuf, sarena.size(), NCCL_PTR_HOST, &smh));
  DEMO_CHECK(net.reg_mr(rc, rbuf, rarena.size(), NCCL_PTR_HOST, &rmh));

  const long total = long((cfg.bytes + m - 1) / m);
  std::deque<void*> sends, recvs;
  long sposted = 0, rposted = 0, sdone = 0, rdone = 0;
  const double t0 = now_s();
  while (sdone < total || rdone < total) {
    const long before = sposted + rposted + sdone + rdone;
    while (rposted < total && recvs.size() < kSlots) {
      void* data = rbuf + (rposted % kSlots) * m;
      size_t size = m;
      int tag = 0;
      void* req = nullptr;
      DEMO_CHECK(net.irecv(rc, 1, &data, &size, &tag, &rmh, false, &req));
      if (!req) break;
      recvs.push_back(req);
      ++rposted;
    }
    while (sposted < total && sends.size() < kSlots) {
      void* req = nullptr;
      DEMO_CHECK(net.isend(sc, sbuf + (sposted % kSlots) * m, m, 0, smh, &req));
      if (!req) break;
      sends.push_back(req);
      ++sposted;
    }
    int done = 0, size = 0;
    if (!sends.empty()) {
      DEMO_CHECK(net.test(sends.front(), &done, &size));
      if (done) {
        sends.pop_front();
        ++sdone;
      }
    }
    if (!recvs.empty()) {
      DEMO_CHECK(net.test(recvs.front(), &done, &size));
      if (done) {
        const size_t slot = size_t(rdone % kSlots);
        if (size_t(size) != m || memcmp(rbuf + slot * m, expect.data() + slot * m, m) != 0)
          ++res.bad_messages;
        recvs.pop_front();
        ++rdone;
      }
    }
    if (sposted + rposted + sdone + rdone == before) sched_yield();  // idle: as NCCL's proxy does
  }
  res.seconds = now_s() - t0;
  res.messages = rdone;
  DEMO_CHECK(net.dereg_mr(sc, smh));
  DEMO_CHECK(net.dereg_mr(rc, rmh));
  DEMO_CHECK(net.close_send(sc));
  DEMO_CHECK(net.close_recv(rc));
  DEMO_CHECK(net.close_listen(lc));
  DEMO_CHECK(net.finalize());
#undef DEMO_CHECK
  if (cfg.pinned) {
    client::host_free_mapped(sbuf);
    client::host_free_mapped(rbuf);
  }
  client::CommSummary s;
  if (client::last_summary("send", &s)) {
    res.mb_in = s.mb_in;
    res.mb_wire = s.mb_wire;
    res.compressed = s.compressed;
    res.codec_s = s.codec_s;
    res.gpu_jobs = s.gpu_jobs;
  }
  res.ok = true;
  return res;
}

}  // namespace

bool ExchangeResult::ok() const { return rank[0].ok && rank[1].ok; }
bool ExchangeResult::bit_exact() const { return ok() && rank[0].bad_messages == 0 && rank[1].bad_messages == 0; }
double ExchangeResult::gbps() const {
  const double t = std::max(rank[0].seconds, rank[1].seconds);
  return t > 0 ? (rank[0].mb_in + rank[1].mb_in) / 2 / 1e3 / t : 0;
}
double ExchangeResult::ratio() const {
  const double in = rank[0].mb_in + rank[1].mb_in;
  return in > 0 ? (rank[0].mb_wire + rank[1].mb_wire) / in : 1;
}

ExchangeResult run_exchange(const ExchangeConfig& cfg) {
  ExchangeResult out;
  int h01[2], h10[2], res[2][2];
  if (pipe(h01) || pipe(h10) || pipe(res[0]) || pipe(res[1])) {
    snprintf(out.rank[0].error, sizeof out.rank[0].error, "pipe() failed");
    return out;
  }
  pid_t pids[2];
  fflush(nullptr);  // the children must not inherit (and print again) buffered output
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(600);  // a stuck exchange ends instead of hanging its caller
      for (const auto& kv : cfg.env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      RankResult rr = rank_main(cfg, r, r == 0 ? h01[1] : h10[1], r == 0 ? h10[0] : h01[0]);
      (void)!write(res[r][1], &rr, sizeof rr);
      exit(0);  // exit(), not _exit(): sanitizer leak checks run at exit
    }
  }
  for (int fd : {h01[0], h01[1], h10[0], h10[1], res[0][1], res[1][1]}) close(fd);
  for (int r = 0; r < 2; ++r) {
    if (!read_full(res[r][0], &out.rank[r], sizeof out.rank[r]) && !out.rank[r].error[0])
      snprintf(out.rank[r].error, sizeof out.rank[r].error, "rank %d died", r);
    close(res[r][0]);
  }
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) out.rank[r].ok = false;
  }
  return out;
}

std::string default_plugin_path() {
  if (const char* p = getenv("ZIPCCL_PLUGIN")) return p;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    const std::string installed = std::string(exe, strrchr(exe, '/') + 1) + ZIPCCL_PLUGIN_FROM_BIN;
    char real[4096];
    if (access(installed.c_str(), R_OK) == 0 && realpath(installed.c_str(), real)) return real;
  }
  return ZIPCCL_DEFAULT_PLUGIN;
}

}  // namespace zipccl::demo
