#include "exchange.h"

#include <initializer_list>
#include <sched.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
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

// One rank's two connections to the other (it sends on one, receives on the other), set up
// through the handle pipes, with its send and receive buffers registered.
struct Ends {
  PluginNet net;
  // One connection each way per channel, as NCCL opens one per channel and peer; every channel
  // registers the same two buffers.
  std::vector<void*> lc, sc, rc, smh, rmh;
  ncclResult_t failed = ncclSuccess;
  explicit Ends(const ExchangeConfig& cfg) : net(cfg.plugin, cfg.version) {}

  // Null, or the call that failed (its result in `failed`).
#define ENDS_CHECK(call)                   \
  do {                                     \
    if ((failed = (call)) != ncclSuccess) \
      return #call;                        \
  } while (0)
  const char* open(int channels, int handle_out, int handle_in, char* sbuf, size_t sbytes, char* rbuf, size_t rbytes) {
    ENDS_CHECK(net.init());
    const size_t n = size_t(channels);
    lc.assign(n, nullptr), sc.assign(n, nullptr), rc.assign(n, nullptr), smh.assign(n, nullptr), rmh.assign(n, nullptr);
    std::vector<unsigned char> mine(n * NCCL_NET_HANDLE_MAXSIZE), theirs(n * NCCL_NET_HANDLE_MAXSIZE);
    for (size_t c = 0; c < n; ++c) ENDS_CHECK(net.listen(0, &mine[c * NCCL_NET_HANDLE_MAXSIZE], &lc[c]));
    if (write(handle_out, mine.data(), mine.size()) != ssize_t(mine.size()) ||
        !read_full(handle_in, theirs.data(), theirs.size())) {
      failed = ncclSystemError;
      return "handle exchange";
    }
    for (size_t c = 0; c < n; ++c) {
      while (!sc[c] || !rc[c]) {
        if (!sc[c]) ENDS_CHECK(net.connect(0, &theirs[c * NCCL_NET_HANDLE_MAXSIZE], &sc[c]));
        if (!rc[c]) ENDS_CHECK(net.accept(lc[c], &rc[c]));
      }
      ENDS_CHECK(net.reg_mr(sc[c], sbuf, sbytes, NCCL_PTR_HOST, &smh[c]));
      ENDS_CHECK(net.reg_mr(rc[c], rbuf, rbytes, NCCL_PTR_HOST, &rmh[c]));
    }
    return nullptr;
  }
  const char* close() {
    for (size_t c = 0; c < sc.size(); ++c) {
      ENDS_CHECK(net.dereg_mr(sc[c], smh[c]));
      ENDS_CHECK(net.dereg_mr(rc[c], rmh[c]));
      ENDS_CHECK(net.close_send(sc[c]));
      ENDS_CHECK(net.close_recv(rc[c]));
      ENDS_CHECK(net.close_listen(lc[c]));
    }
    ENDS_CHECK(net.finalize());
    return nullptr;
  }
#undef ENDS_CHECK
};

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
  Ends e(cfg);
  if (const char* what = e.open(1, handle_out, handle_in, sbuf, sarena.size(), rbuf, rarena.size()))
    return error(what, e.failed);
  PluginNet& net = e.net;
  void *sc = e.sc[0], *rc = e.rc[0], *smh = e.smh[0], *rmh = e.rmh[0];

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
#undef DEMO_CHECK
  if (const char* what = e.close()) return error(what, e.failed);
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

// Runs body(rank, handle_out, handle_in) in two forked processes with cfg's environment; each
// returns a plain struct with `ok` and `error`, which comes back through a pipe.
template <class R, class F>
void run_ranks(const std::map<std::string, std::string>& env, F body, R out[2]) {
  int h01[2], h10[2], res[2][2];
  if (pipe(h01) || pipe(h10) || pipe(res[0]) || pipe(res[1])) {
    snprintf(out[0].error, sizeof out[0].error, "pipe() failed");
    return;
  }
  pid_t pids[2];
  fflush(nullptr);  // the children must not inherit (and print again) buffered output
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(600);  // a stuck exchange ends instead of hanging its caller
      for (const auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      R rr = body(r, r == 0 ? h01[1] : h10[1], r == 0 ? h10[0] : h01[0]);
      (void)!write(res[r][1], &rr, sizeof rr);
      exit(0);  // exit(), not _exit(): sanitizer leak checks run at exit
    }
  }
  for (int fd : {h01[0], h01[1], h10[0], h10[1], res[0][1], res[1][1]}) close(fd);
  for (int r = 0; r < 2; ++r) {
    if (!read_full(res[r][0], &out[r], sizeof out[r]) && !out[r].error[0])
      snprintf(out[r].error, sizeof out[r].error, "rank %d died", r);
    close(res[r][0]);
  }
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) out[r].ok = false;
  }
}

constexpr int kWarmup = 50;

// Median and 90th percentile of round trips in seconds, into r in microseconds.
void summarize(std::vector<double> rtt, LatencyResult* r) {
  if (rtt.empty()) return;
  std::sort(rtt.begin(), rtt.end());
  r->median_us = rtt[rtt.size() / 2] * 1e6;
  r->p90_us = rtt[rtt.size() * 9 / 10] * 1e6;
}

// Rank 0 times each round trip or step (Pattern). Both send the same generated bytes, so each
// checks what it received against its own send buffer (after the clock, then clears it). Two
// receive buffers: in round trips the next receive is posted before this one's echo goes.
LatencyResult pingpong_main(const ExchangeConfig& cfg, Pattern pattern, int iters, int rank, int handle_out,
                            int handle_in) {
  LatencyResult res;
  const size_t m = cfg.msg_bytes;
  const int channels = cfg.channels;
  std::vector<char> sbuf(m), rbuf(size_t(channels) * 2 * m, 0);
  client::fill(cfg.kind, 1, 0, 0, sbuf.data(), m);
  Ends e(cfg);
  auto error = [&](const char* what, ncclResult_t r) {
    snprintf(res.error, sizeof res.error, "%s returned %d", what, int(r));
    return res;
  };
  if (const char* what = e.open(channels, handle_out, handle_in, sbuf.data(), m, rbuf.data(), rbuf.size()))
    return error(what, e.failed);
  ncclResult_t rc = ncclSuccess;
  std::vector<void*> rreq(static_cast<size_t>(channels)), sreq(static_cast<size_t>(channels)), arriving;
  // Tests every open request in turn until all are done, calling then(channel) as each finishes
  // and yielding the core after a sweep that finished none, as NCCL's proxy thread does across
  // channels.
  auto wait_all = [&](std::vector<void*>& reqs, auto then) {
    for (bool open = true; open;) {
      open = false;
      bool finished = false;
      for (int c = 0; c < channels; ++c) {
        int done = 0, size = 0;
        if (reqs[c] && (rc = e.net.test(reqs[c], &done, &size)) != ncclSuccess) return false;
        if (done && !then(c)) return false;
        if (done) reqs[c] = nullptr, finished = true;
        open |= reqs[c] != nullptr;
      }
      if (open && !finished) std::this_thread::yield();
    }
    return true;
  };
  auto nothing = [](int) { return true; };
  auto slot = [&](int c, long i) { return rbuf.data() + (size_t(c) * 2 + size_t(i % 2)) * m; };
  auto post_recv = [&](int c, long i) {
    void* data = slot(c, i);
    size_t size = m;
    int tag = 0;
    rreq[c] = nullptr;
    while (!rreq[c] &&
           (rc = e.net.irecv(e.rc[c], 1, &data, &size, &tag, &e.rmh[c], false, &rreq[c])) == ncclSuccess) {
    }
    return rc == ncclSuccess;
  };
  auto send = [&](int c) {
    sreq[c] = nullptr;
    while (!sreq[c] && (rc = e.net.isend(e.sc[c], sbuf.data(), m, 0, e.smh[c], &sreq[c])) == ncclSuccess) {
    }
    return rc == ncclSuccess;
  };
  auto check = [&](int c, long i) {
    char* got = slot(c, i);
    const bool same = memcmp(got, sbuf.data(), m) == 0;
    memset(got, 0, m);
    return same;
  };
  // Rank 1's round trip: each channel's echo goes as soon as its message is in (its next receive
  // posted first, into rreq while `arriving` holds this one's).
  auto echo_all = [&](long i, bool more) {
    arriving = rreq;
    return wait_all(arriving, [&](int c) { return (!more || post_recv(c, i + 1)) && send(c); }) &&
           wait_all(sreq, nothing);
  };
  std::vector<double> rtt;
  long bad = 0;
  const long total = kWarmup + iters;
  for (int c = 0; pattern == Pattern::kRoundTrip && rank == 1 && c < channels; ++c)
    if (!post_recv(c, 0)) return error("irecv", rc);
  for (long i = 0; i < total; ++i) {
    if (pattern == Pattern::kStep || rank == 0) {  // a step is a ping on both ranks
      const double t0 = now_s();
      for (int c = 0; c < channels; ++c)
        if (!post_recv(c, i) || !send(c)) return error(pattern == Pattern::kStep ? "step" : "ping", rc);
      if (!wait_all(sreq, nothing) || !wait_all(rreq, nothing))
        return error(pattern == Pattern::kStep ? "step" : "ping", rc);
      if (i >= kWarmup) rtt.push_back(now_s() - t0);
    } else if (!echo_all(i, i + 1 < total)) {
      return error("pong", rc);
    }
    for (int c = 0; c < channels; ++c) bad += !check(c, i);
  }
  if (bad) {
    snprintf(res.error, sizeof res.error, "rank %d: %ld of %ld messages differ", rank, bad, total * channels);
    return res;
  }
  if (const char* what = e.close()) return error(what, e.failed);
  summarize(std::move(rtt), &res);
  res.ok = true;
  return res;
}

// Each socket sends `out` bytes and receives `in` bytes (either may be 0), all at once, as each
// allows: one thread busy-polling every channel's socket, as NCCL's Socket transport does (and
// yielding the core after a sweep that moved nothing, as its proxy thread does). sent and got:
// the caller's counters, one per socket, so that the timed loop allocates nothing.
bool move_all(const std::vector<int>& fds, const char* src, size_t out, char* dst, size_t in,
              std::vector<size_t>& sent, std::vector<size_t>& got) {
  sent.assign(fds.size(), 0);
  got.assign(fds.size(), 0);
  for (bool open = true; open;) {
    open = false;
    bool moved = false;
    for (size_t c = 0; c < fds.size(); ++c) {
      if (sent[c] < out) {
        const ssize_t r = ::send(fds[c], src + sent[c], out - sent[c], MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r > 0) sent[c] += size_t(r), moved = true;
        else if (r < 0 && errno != EAGAIN && errno != EINTR) return false;
      }
      if (got[c] < in) {
        const ssize_t r = ::recv(fds[c], dst + got[c], in - got[c], MSG_DONTWAIT);
        if (r > 0) got[c] += size_t(r), moved = true;
        else if (r == 0 || (errno != EAGAIN && errno != EINTR)) return false;
      }
      open |= sent[c] < out || got[c] < in;
    }
    if (open && !moved) std::this_thread::yield();
  }
  return true;
}

// One TCP connection per channel on loopback (rank 0 listens and passes its port through the pipe).
LatencyResult tcp_pingpong_main(size_t m, int channels, Pattern pattern, int iters, int rank, int handle_out,
                                int handle_in) {
  LatencyResult res;
  std::vector<int> fds;
  auto fail = [&](const char* what) {
    snprintf(res.error, sizeof res.error, "%s: %s", what, strerror(errno));
    for (int fd : fds) ::close(fd);
    return res;
  };
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (rank == 0) {
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, channels) ||
        getsockname(l, reinterpret_cast<sockaddr*>(&a), &alen))
      return fail("listen");
    if (write(handle_out, &a.sin_port, sizeof a.sin_port) != ssize_t(sizeof a.sin_port)) return fail("port");
    for (int c = 0; c < channels; ++c) {
      const int fd = accept(l, nullptr, nullptr);
      if (fd < 0) break;
      fds.push_back(fd);
    }
    ::close(l);
  } else {
    if (!read_full(handle_in, &a.sin_port, sizeof a.sin_port)) return fail("port");
    for (int c = 0; c < channels; ++c) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0) break;
      fds.push_back(fd);
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a)) return fail("connect");
    }
  }
  if (fds.size() != size_t(channels)) return fail("socket");
  const int one = 1;
  for (int fd : fds) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Every channel reads into the same buffer: the baseline's bytes are not checked.
  std::vector<char> buf(m, 1), in(m);
  std::vector<size_t> sent(fds.size()), got(fds.size());
  std::vector<double> rtt;
  for (long i = 0; i < kWarmup + iters; ++i) {
    const double t0 = now_s();
    const bool ok = pattern == Pattern::kStep || rank == 0
                        ? move_all(fds, buf.data(), m, in.data(), m, sent, got)
                        : move_all(fds, nullptr, 0, in.data(), m, sent, got) &&
                              move_all(fds, buf.data(), m, nullptr, 0, sent, got);
    if (!ok) return fail("ping-pong");
    if (i >= kWarmup) rtt.push_back(now_s() - t0);
  }
  for (int fd : fds) ::close(fd);
  summarize(std::move(rtt), &res);
  res.ok = true;
  return res;
}

LatencyResult pair_result(LatencyResult r[2]) {
  if (!r[1].ok && r[0].ok) {
    r[0].ok = false;
    memcpy(r[0].error, r[1].error, sizeof r[0].error);
  }
  return r[0];
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
  run_ranks(cfg.env, [&](int r, int hout, int hin) { return rank_main(cfg, r, hout, hin); }, out.rank);
  return out;
}

LatencyResult run_pingpong(const ExchangeConfig& cfg, Pattern pattern, int iters) {
  LatencyResult r[2];
  run_ranks(cfg.env, [&](int rank, int hout, int hin) { return pingpong_main(cfg, pattern, iters, rank, hout, hin); },
            r);
  return pair_result(r);
}

LatencyResult run_tcp_pingpong(size_t bytes, int channels, Pattern pattern, int iters) {
  LatencyResult r[2];
  run_ranks({}, [&](int rank, int hout, int hin) {
    return tcp_pingpong_main(bytes, channels, pattern, iters, rank, hout, hin);
  }, r);
  return pair_result(r);
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
