// One rank of a two-process exchange through the real plugin, driven the way NCCL's proxy drives
// a net plugin: listen/connect/accept polled without blocking, regMr once per buffer arena,
// isend/irecv with up to 32 requests in flight (grouped receives when --group > 1), test() polled
// in posting order, every received byte checked. Prints one "RESULT ..." line for the test.
//
//   zip_peer recv --plugin=P --version=V [--msgs=N --group=G --max=B --kind=K --seed=S]
//            [--ll] [--ll-reg] [--attr-ll] [--die-after=K] [--expect-error] [--device]
//            [--dmabuf] [--emulated-device] [--flush] [--tc=N] [--pause-at=K] [--pause-every=K]
//   zip_peer send ... --handle=HEX
//   zip_peer probe --plugin=P --version=V   init only: the log, then the devices
//   zip_peer loop --plugin=P --version=V [--rounds=R --msgs=N --max=B --kind=K --seed=S]
//            one process at both ends: R rounds of connecting to itself, sending N messages
//            (each checked) and closing; RESULT's errors= has each round's first error (0: none)
//            and msgs= the last round's messages
//   zip_peer tune --plugin=P [--tuner=T]   the v5 tuner table of T (default P) on a 2-rank, 2-node
//            communicator, P's net plugin initialised first as NCCL does: one
//            all_gather of 1 MiB over a cost table of 100s; RESULT has its ring/Simple and
//            tree/Simple entries after the call and the channels it asked for
// --device: NCCL's buffers are device memory (regMr NCCL_PTR_CUDA); the data is generated and
// checked in a host copy, moved to and from the device around the plugin's calls. --dmabuf:
// registered by regMrDmaBuf with an fd CUDA exports. --emulated-device: host memory (a mapped
// memfd) announced as device memory through regMrDmaBuf with that memfd, for a plugin under
// NCCL_ZIP_GPU_EMULATE=1, which takes it for the GPU's. --flush (recv): iflush after every
// completed receive, as NCCL does with GPUDirect RDMA. --tc: the communicator's traffic class
// (v10 connect / v11 init config); RESULT's tclass= and inline= are what the verbs transport
// logged for its connection (-1 if nothing).
// The receiver prints "HANDLE <hex>" first. --die-after: raise SIGKILL after K messages;
// --expect-error: succeed only if the plugin reports an error (the other side was killed).
// --pause-at (recv): once K messages arrived, post nothing for 300 ms, then a window of receives.
// --pause-every (recv): receives posted K at a time, as NCCL does for a collective of K messages per
// connection; after each K have arrived, nothing for 30 ms (an application between collectives).
// --env=K=V: an environment variable for this side only (the other's comes from the parent).
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device_mem.h"
#include "mapped_memfd.h"
#include "net_client.h"
#include "traffic.h"
#include "tuner_abi.h"

using namespace zipccl::client;

namespace {

struct Args {
  std::string role, plugin, handle, tuner;
  int version = 11, group = 1, tc = -1, rounds = 1;
  long msgs = 200, die_after = -1, pause_at = -1, pause_every = -1;
  size_t max = 256 << 10;
  Kind kind = Kind::kMix;
  uint64_t seed = 1;
  bool ll = false, ll_reg = false, attr_ll = false, expect_error = false, device = false;
  bool dmabuf = false, flush = false, emulated_device = false;
  double tune_after_us = 0;  // send: after the exchange, ask the tuner with NCCL estimates of this
};

Args parse(int argc, char** argv) {
  Args a;
  a.role = argc > 1 ? argv[1] : "";
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    auto val = [&](const char* k) -> const char* {
      size_t l = strlen(k);
      return s.compare(0, l, k) == 0 ? s.c_str() + l : nullptr;
    };
    if (auto v = val("--env=")) {  // K=V for this side only, before the plugin reads it
      const std::string kv = v;
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    } else if (auto v = val("--plugin=")) a.plugin = v;
    else if (auto v = val("--tuner=")) a.tuner = v;
    else if (auto v = val("--handle=")) a.handle = v;
    else if (auto v = val("--version=")) a.version = atoi(v);
    else if (auto v = val("--group=")) a.group = atoi(v);
    else if (auto v = val("--tc=")) a.tc = atoi(v);
    else if (auto v = val("--rounds=")) a.rounds = atoi(v);
    else if (auto v = val("--msgs=")) a.msgs = atol(v);
    else if (auto v = val("--max=")) a.max = size_t(atol(v));
    else if (auto v = val("--kind=")) {
      if (!parse_kind(v, &a.kind)) {
        fprintf(stderr, "unknown data kind %s\n", v);
        exit(2);
      }
    }
    else if (auto v = val("--seed=")) a.seed = strtoull(v, nullptr, 0);
    else if (auto v = val("--die-after=")) a.die_after = atol(v);
    else if (auto v = val("--pause-at=")) a.pause_at = atol(v);
    else if (auto v = val("--pause-every=")) a.pause_every = atol(v);
    else if (auto v = val("--tune-after=")) a.tune_after_us = atof(v);
    else if (s == "--ll") a.ll = true;
    else if (s == "--ll-reg") a.ll_reg = true;
    else if (s == "--attr-ll") a.attr_ll = true;
    else if (s == "--expect-error") a.expect_error = true;
    else if (s == "--device") a.device = true;
    else if (s == "--dmabuf") a.dmabuf = true;
    else if (s == "--emulated-device") a.emulated_device = a.dmabuf = true;
    else if (s == "--flush") a.flush = true;
    else {
      fprintf(stderr, "unknown argument %s\n", s.c_str());
      exit(2);
    }
  }
  return a;
}

std::string to_hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

void from_hex(const std::string& s, unsigned char* p, size_t n) {
  for (size_t i = 0; i < n && 2 * i + 1 < s.size(); ++i) p[i] = (unsigned char)std::stoi(s.substr(2 * i, 2), nullptr, 16);
}

// The comm summary the plugin logs at close (the receiver's, else the sender's).
CommSummary summary_from_log() {
  CommSummary s;
  if (last_summary("recv", &s) || last_summary("send", &s)) return s;
  return CommSummary{};
}

long g_flushes = 0;  // iflush calls that returned a request (--flush)

// The number after `key` in the verbs transport's connection log line ("traffic class 96",
// "inline 64 bytes"), -1 without one.
long from_connection_log(const std::string& key) {
  for (const auto& l : log_lines()) {
    const size_t p = l.find(key);
    if (p != std::string::npos && l.find(" QP") != std::string::npos) return atol(l.c_str() + p + key.size());
  }
  return -1;
}

long g_tuned_us = -1;  // --tune-after: the ring/Simple entry the tuner left, us

int finish(bool ok, const char* what, long done) {
  const CommSummary s = summary_from_log();
  // The plugin's own words at close (why it sent raw what it did), for a failing test's message.
  for (const auto& l : log_lines())
    if (l.find(" comm ") != std::string::npos && l.find(" closed: ") != std::string::npos) printf("SUMMARY %s\n", l.c_str());
  printf("RESULT ok=%d msgs=%ld compressed=%ld gpu_jobs=%ld offered=%ld probes=%ld receives=%ld unoffered=%ld cold=%ld pushed=%ld "
         "rejected=%d slow_starts=%d flushes=%ld tclass=%ld inline=%ld tuned=%ld what=%s\n",
         ok ? 1 : 0, done, s.compressed, s.gpu_jobs, s.offered, s.probes, s.receives, s.unoffered, s.cold, s.pushed,
         count_log("rejected connection"), count_log("waits for its stopped kernel ran out"),
         g_flushes, from_connection_log("traffic class "), from_connection_log("inline "), g_tuned_us, what);
  fflush(stdout);
  return ok ? 0 : 1;
}

#define CHECK_NCCL(call)                                                         \
  do {                                                                           \
    ncclResult_t r_ = (call);                                                    \
    if (r_ != ncclSuccess) return on_error(#call, r_);                           \
  } while (0)

// NCCL's buffer: host memory, or device memory (real, or emulated by a mapped memfd) mirrored by a
// host copy for generating and checking the data.
class Arena {
 public:
  Arena(size_t bytes, bool device, bool emulated) : host_(bytes) {
    if (emulated) {
      emulated_ = std::make_unique<zipccl::MappedMemfd>("zip_peer-emulated-device", bytes);
      if (!emulated_->ok()) {
        fprintf(stderr, "emulated device memory: %s\n", emulated_->error().c_str());
        exit(2);
      }
      dev_ = emulated_->data();
      memset(dev_, 0xA5, bytes);
    } else if (device) {
      dev_ = static_cast<char*>(dev_alloc(bytes));
      dev_fill(dev_, 0xA5, bytes);
    }
  }
  ~Arena() {
    if (dev_ && !emulated_) dev_free(dev_);
  }
  char* host() { return host_.data(); }
  size_t size() const { return host_.size(); }
  // What the plugin is given.
  char* nccl() { return dev_ ? dev_ : host_.data(); }
  int type() const { return dev_ ? NCCL_PTR_CUDA : NCCL_PTR_HOST; }
  // A DMA-BUF fd of the device memory for regMrDmaBuf, which the caller closes; -1 with *why.
  int dmabuf_fd(std::string* why) {
    if (emulated_) return dup(emulated_->fd());
    return dev_dmabuf_fd(dev_, host_.size(), why);
  }
  // After the host copy of [off, off+n) was written / before it is read.
  void push(size_t off, size_t n) {
    if (!dev_ || !n) return;
    if (emulated_)
      memcpy(dev_ + off, host_.data() + off, n);
    else
      to_device(dev_ + off, host_.data() + off, n);
  }
  void pull(size_t off, size_t n) {
    if (!dev_ || !n) return;
    if (emulated_)
      memcpy(host_.data() + off, dev_ + off, n);
    else
      from_device(host_.data() + off, dev_ + off, n);
  }

 private:
  std::vector<char> host_;
  char* dev_ = nullptr;
  std::unique_ptr<zipccl::MappedMemfd> emulated_;
};

class Peer {
 public:
  explicit Peer(const Args& a) : a_(a), net_(a.plugin, a.version, a.tc) {}

  // Which transport and devices init chose: every log line, then RESULT with the devices as
  // name:port,... (ok=0 when init failed).
  int probe() {
    const ncclResult_t r = net_.init();
    for (const auto& l : log_lines()) printf("LOG %s\n", l.c_str());
    if (r != ncclSuccess) return finish(false, "init", 0);
    int ndev = 0;
    CHECK_NCCL(net_.devices(&ndev));
    std::string devs;
    int ptr = 0;
    for (int d = 0; d < ndev; ++d) {
      NetProps p;
      CHECK_NCCL(net_.properties(d, &p));
      devs += (d ? "," : "") + p.name + ":" + std::to_string(p.port);
      if (d == 0) ptr = p.ptr_support;
    }
    const char* min_channels = getenv("NCCL_MIN_NCHANNELS");
    printf("RESULT ok=1 ndev=%d ptr=%d min_nchannels=%d devs=%s\n", ndev, ptr, min_channels ? atoi(min_channels) : -1,
           devs.c_str());
    CHECK_NCCL(net_.finalize());
    return 0;
  }

  int loop() {
    if (net_.init() != ncclSuccess) return finish(false, "init", 0);
    std::string errors;
    long done = 0;
    for (int round = 0; round < a_.rounds; ++round) {
      if (round) usleep(300 * 1000);  // as a job that failed starts again: the device's events are in
      const ncclResult_t e = loop_round(&done);
      if (e == ncclInternalError) return finish(false, "a wrong byte or size", done);
      errors += (round ? "," : "") + std::to_string(int(e));
    }
    CHECK_NCCL(net_.finalize());
    printf("RESULT ok=1 errors=%s msgs=%ld\n", errors.c_str(), done);
    return 0;
  }

  // The v5 tuner (this process's plugin's, or --tuner's) on an all_gather of `bytes` for
  // communicator comm_id, 2 ranks on 2 nodes, every entry of NCCL's table `us` (ring_only: the
  // ring's, the others ignored as NCCL's all_gather table has them): the table after.
  bool ask_tuner(uint64_t comm_id, size_t bytes, float us, bool ring_only, float (*rows)[3], int* channels) {
    void* lib = dlopen((a_.tuner.empty() ? a_.plugin : a_.tuner).c_str(), RTLD_NOW | RTLD_LOCAL);
    auto* t = lib ? static_cast<ncclTuner_v5_t*>(dlsym(lib, "ncclTunerPlugin_v5")) : nullptr;
    if (!t) return false;
    for (int a = 0; a < 7; ++a)
      for (int p = 0; p < 3; ++p) rows[a][p] = ring_only && a != zipccl::tuner::kAlgoRing ? zipccl::tuner::kIgnore : us;
    float** table = reinterpret_cast<float**>(rows);  // as NCCL passes it: the array cast to float**
    void* ctx = nullptr;
    const bool ok = t->init(&ctx, comm_id, 2, 2, nullptr, nullptr, nullptr) == ncclSuccess &&
                    t->getCollInfo(ctx, zipccl::tuner::kAllGather, bytes, 1, table, 7, 3, 0, channels) == ncclSuccess &&
                    t->finalize(ctx) == ncclSuccess;
    dlclose(lib);
    return ok;
  }

  int tune() {
    if (net_.init() != ncclSuccess) return finish(false, "init", 0);
    float rows[7][3];
    int channels = 0;
    if (!ask_tuner(0x7e57, 1 << 20, 100, false, rows, &channels)) return finish(false, "tuner call failed", 0);
    printf("RESULT ok=1 ring_simple=%g tree_simple=%g channels=%d\n", double(rows[1][2]), double(rows[0][2]), channels);
    CHECK_NCCL(net_.finalize());
    return 0;
  }

  int run() {
    if (net_.init() != ncclSuccess) return finish(false, "init", 0);
    int ndev = 0;
    net_.devices(&ndev);
    if (ndev < 1) return finish(false, "no device", 0);
    return a_.role == "recv" ? run_recv() : run_send();
  }

 private:
  // One round of loop(): the first error, ncclInternalError for a wrong byte or size.
  ncclResult_t loop_round(long* done) {
    *done = 0;
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void *lc = nullptr, *sc = nullptr, *rc = nullptr, *smh = nullptr, *rmh = nullptr;
    std::vector<char> sbuf(a_.max), rbuf(a_.max);
    ncclResult_t e = net_.listen(0, handle, &lc);
    while (e == ncclSuccess && (!sc || !rc)) {
      if (!sc) e = net_.connect(0, handle, &sc);
      if (e == ncclSuccess && !rc) e = net_.accept(lc, &rc);
    }
    if (e == ncclSuccess) e = net_.reg_mr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh);
    if (e == ncclSuccess) e = net_.reg_mr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh);
    for (long m = 0; e == ncclSuccess && m < a_.msgs; ++m) {
      const size_t n = msg_size(a_.seed, uint64_t(m), 0, a_.max);
      fill(a_.kind, a_.seed, uint64_t(m), 0, sbuf.data(), n);
      void* data = rbuf.data();
      size_t cap = rbuf.size();
      int tag = 0;
      void *rreq = nullptr, *sreq = nullptr;
      e = net_.irecv(rc, 1, &data, &cap, &tag, &rmh, false, &rreq);
      while (e == ncclSuccess && !sreq) e = net_.isend(sc, sbuf.data(), n, 0, smh, &sreq);
      int sdone = 0, rdone = 0, ssize = 0, rsize = 0;
      while (e == ncclSuccess && (!sdone || !rdone)) {
        if (!sdone) e = net_.test(sreq, &sdone, &ssize);
        if (e == ncclSuccess && !rdone) e = net_.test(rreq, &rdone, &rsize);
      }
      if (e == ncclSuccess && (size_t(rsize) != n || memcmp(rbuf.data(), sbuf.data(), n) != 0)) return ncclInternalError;
      if (e == ncclSuccess) ++*done;
    }
    if (smh) net_.dereg_mr(sc, smh);
    if (rmh) net_.dereg_mr(rc, rmh);
    if (sc) net_.close_send(sc);
    if (rc) net_.close_recv(rc);
    if (lc) net_.close_listen(lc);
    return e;
  }

  int on_error(const char* call, ncclResult_t r) {
    if (a_.expect_error) {
      printf("RESULT ok=1 error=%d call=%s msgs=%ld\n", int(r), call, done_);
      fflush(stdout);
      exit(0);  // exit(), not _exit(): LeakSanitizer checks at exit
    }
    fprintf(stderr, "peer %s: %s returned %d after %ld messages\n", a_.role.c_str(), call, int(r), done_);
    const auto& log = log_lines();  // what the plugin said last, for the test's output
    for (size_t i = log.size() > 8 ? log.size() - 8 : 0; i < log.size(); ++i) fprintf(stderr, "  %s\n", log[i].c_str());
    return finish(false, call, done_);
  }

  void maybe_die() {
    if (a_.die_after >= 0 && done_ >= a_.die_after) raise(SIGKILL);
  }

  // regMr, or with --dmabuf regMrDmaBuf of an fd exported for the device arena, as NCCL does.
  int reg(void* comm, Arena& arena, void** mh) {
    if (!a_.dmabuf) {
      CHECK_NCCL(net_.reg_mr(comm, arena.nccl(), arena.size(), arena.type(), mh));
      return 0;
    }
    std::string why;
    const int fd = arena.dmabuf_fd(&why);
    if (fd < 0) return finish(false, why.c_str(), 0);
    const ncclResult_t r = net_.reg_mr_dmabuf(comm, arena.nccl(), arena.size(), arena.type(), 0, fd, mh);
    close(fd);  // the registration keeps what it needs, as with NCCL
    if (r != ncclSuccess) return on_error("reg_mr_dmabuf", r);
    return 0;
  }

  // NCCL's flush after a completed receive into GPU memory (Simple protocol, GDR). A receive of
  // device memory with bytes in it must be flushed (a request back); others need none.
  int flush(void* rc, void** data, int* sizes, void** mhs) {
    void* req = nullptr;
    CHECK_NCCL(net_.iflush(rc, a_.group, data, sizes, mhs, &req));
    bool bytes = false;
    for (int j = 0; j < a_.group; ++j) bytes |= sizes[j] > 0;
    if (bool(req) != (bytes && (a_.device || a_.emulated_device)))
      return finish(false, req ? "flush of nothing" : "no flush", done_);
    if (req) ++g_flushes;
    for (int done = 0; req && !done;) CHECK_NCCL(net_.test(req, &done, nullptr));
    return 0;
  }

  int run_recv() {
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* lc = nullptr;
    void* rc = nullptr;
    CHECK_NCCL(net_.listen(0, handle, &lc));
    printf("HANDLE %s\n", to_hex(handle, sizeof handle).c_str());
    fflush(stdout);
    while (!rc) CHECK_NCCL(net_.accept(lc, &rc));
    if (a_.attr_ll) CHECK_NCCL(net_.set_proto(1u << 0));
    // One arena, registered once: slot s, sub j at (s * group + j) * max. --ll-reg registers it
    // with the size NCCL's LL buffer has, which is how a v8 plugin recognises LL receives.
    const size_t slots = 32 * size_t(a_.group);
    const size_t arena_bytes = a_.ll_reg ? 524288 : slots * a_.max;
    if (a_.ll_reg && slots * a_.max > arena_bytes) return finish(false, "arena too small for --ll-reg", 0);
    Arena arena(arena_bytes, a_.device, a_.emulated_device);
    void* mh = nullptr;
    if (int e = reg(rc, arena, &mh)) return e;
    std::deque<std::pair<void*, long>> inflight;  // request, group index
    long posted = 0;
    std::vector<char> want(a_.max);
    bool paused = false;
    long batch_end = a_.pause_every > 0 ? a_.pause_every : a_.msgs;
    while (done_ < a_.msgs) {
      if (posted == a_.pause_at && !paused && inflight.empty()) {  // --pause-at: the link idles
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        paused = true;
      }
      if (a_.pause_every > 0 && posted == batch_end && inflight.empty()) {  // --pause-every
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        batch_end += a_.pause_every;
      }
      while (posted < a_.msgs && posted < batch_end && inflight.size() < 32 && (posted != a_.pause_at || paused)) {
        const size_t slot = size_t(posted % 32);
        void* data[8];
        size_t sizes[8];
        int tags[8];
        void* mhs[8];
        for (int j = 0; j < a_.group; ++j) {
          data[j] = arena.nccl() + (slot * a_.group + j) * a_.max;
          sizes[j] = a_.max;  // capacity: at least what the sender sends
          tags[j] = j;
          mhs[j] = mh;
        }
        void* req = nullptr;
        CHECK_NCCL(net_.irecv(rc, a_.group, data, sizes, tags, mhs, a_.ll, &req));
        if (!req) break;
        inflight.emplace_back(req, posted++);
      }
      if (inflight.empty()) continue;
      int done = 0, sizes[8] = {};
      CHECK_NCCL(net_.test(inflight.front().first, &done, sizes));
      if (!done) continue;
      const long g = inflight.front().second;
      inflight.pop_front();
      if (a_.flush) {
        void* data[8];
        void* mhs[8];
        for (int j = 0; j < a_.group; ++j) {
          data[j] = arena.nccl() + (size_t(g % 32) * a_.group + j) * a_.max;
          mhs[j] = mh;
        }
        if (int e = flush(rc, data, sizes, mhs)) return e;
      }
      for (int j = 0; j < a_.group; ++j) {
        const size_t n = msg_size(a_.seed, uint64_t(g), uint32_t(j), a_.max);
        const size_t off = (size_t(g % 32) * a_.group + j) * a_.max;
        arena.pull(off, n);
        const char* got = arena.host() + off;
        fill(a_.kind, a_.seed, uint64_t(g), uint32_t(j), want.data(), n);
        if (size_t(sizes[j]) != n || memcmp(got, want.data(), n) != 0) {
          fprintf(stderr, "recv: message %ld sub %d: size %d (want %zu) or bytes differ\n", g, j, sizes[j], n);
          return finish(false, "data mismatch", done_);
        }
      }
      ++done_;
      maybe_die();
    }
    CHECK_NCCL(net_.dereg_mr(rc, mh));
    CHECK_NCCL(net_.close_recv(rc));
    CHECK_NCCL(net_.close_listen(lc));
    CHECK_NCCL(net_.finalize());
    if (a_.expect_error) return finish(false, "no error seen", done_);
    return finish(true, "exchange", done_);
  }

  int run_send() {
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    from_hex(a_.handle, handle, sizeof handle);
    void* sc = nullptr;
    while (!sc) CHECK_NCCL(net_.connect(0, handle, &sc));
    const size_t slots = 32 * size_t(a_.group);
    Arena arena(slots * a_.max, a_.device, a_.emulated_device);
    void* mh = nullptr;
    if (int e = reg(sc, arena, &mh)) return e;
    // Each group's subs go out in a scrambled tag order: the plugin matches them by tag.
    struct Pending {
      void* req;
      long g;
      int j;
    };
    std::deque<Pending> inflight;
    std::map<long, int> left;  // group -> subs not yet completed
    long next_g = 0;
    int next_j = 0;
    long filled = -1;  // next_g * 8 + next_j once its bytes are in place (a deferred isend is retried)
    while (done_ < a_.msgs) {
      // Group g uses arena slot g % 32: at most 32 groups from the oldest incomplete one.
      while (next_g < a_.msgs && (left.empty() || next_g - left.begin()->first < 32)) {
        const int j = int((uint64_t(next_j) * 5 + uint64_t(next_g)) % uint64_t(a_.group));
        const size_t n = msg_size(a_.seed, uint64_t(next_g), uint32_t(j), a_.max);
        const size_t off = (size_t(next_g % 32) * a_.group + j) * a_.max;
        char* buf = arena.nccl() + off;
        if (next_j == 0) left[next_g] = a_.group;
        if (filled != next_g * 8 + next_j) {
          fill(a_.kind, a_.seed, uint64_t(next_g), uint32_t(j), arena.host() + off, n);
          arena.push(off, n);
          filled = next_g * 8 + next_j;
        }
        void* req = nullptr;
        CHECK_NCCL(net_.isend(sc, buf, n, j, mh, &req));
        if (!req) {
          if (next_j == 0) left.erase(next_g);
          break;  // no clear-to-send yet: NCCL retries later
        }
        inflight.push_back({req, next_g, j});
        if (++next_j == a_.group) {
          next_j = 0;
          ++next_g;
        }
      }
      for (size_t i = 0; i < inflight.size();) {
        int done = 0, size = -1;
        CHECK_NCCL(net_.test(inflight[i].req, &done, &size));
        if (!done) {
          ++i;
          continue;
        }
        const size_t n = msg_size(a_.seed, uint64_t(inflight[i].g), uint32_t(inflight[i].j), a_.max);
        if (size_t(size) != n) return finish(false, "send size", done_);
        if (--left[inflight[i].g] == 0) {
          left.erase(inflight[i].g);
          ++done_;
          maybe_die();
        }
        inflight.erase(inflight.begin() + long(i));
      }
    }
    if (a_.tune_after_us > 0) {  // the communicator of this exchange (PluginNet's comm id), still open
      float rows[7][3];
      int channels = 0;
      if (!ask_tuner(0x1234, 64 << 20, float(a_.tune_after_us), true, rows, &channels))
        return finish(false, "tuner call failed", done_);
      g_tuned_us = long(rows[1][2]);
    }
    CHECK_NCCL(net_.dereg_mr(sc, mh));
    CHECK_NCCL(net_.close_send(sc));
    CHECK_NCCL(net_.finalize());
    if (a_.expect_error) return finish(false, "no error seen", done_);
    return finish(true, "exchange", done_);
  }

  Args a_;
  PluginNet net_;
  long done_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if ((a.role != "recv" && a.role != "send" && a.role != "probe" && a.role != "loop" && a.role != "tune") ||
      a.plugin.empty() || a.group < 1 ||
      a.group > 8) {
    fprintf(stderr, "usage: zip_peer recv|send|probe|loop|tune --plugin=PATH [options]\n");
    return 2;
  }
  alarm(120);  // a hang is a failure, not a stuck CI job
  Peer p(a);
  if (a.role == "tune") return p.tune();
  return a.role == "probe" ? p.probe() : a.role == "loop" ? p.loop() : p.run();
}
