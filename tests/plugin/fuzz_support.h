// What the fake-peer fuzz tests share: seeded choices, the number of seeds, the outcomes a plugin
// call may have against a hostile peer, and receive buffers between guard bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "net_client.h"
#include "pair.h"

namespace zipccl::test {

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  uint64_t below(uint64_t n) { return n ? g() % n : 0; }
  bool one_in(uint64_t n) { return below(n) == 0; }
  template <class T>
  T pick(std::initializer_list<T> xs) {
    return *(xs.begin() + below(xs.size()));
  }
};

// Seeds per test: ZIP_FUZZ_ITERATIONS, else fallback.
inline int fuzz_iterations(int fallback) {
  const char* s = getenv("ZIP_FUZZ_ITERATIONS");
  return s ? atoi(s) : fallback;
}

// Success, or the errors a peer's fault may cause.
inline bool ok_or_remote(ncclResult_t r) { return r == ncclSuccess || r == ncclRemoteError || r == ncclSystemError; }

// Buffers of the given capacities, zeroed, each between kGuard guard bytes, in one allocation
// (one registration covers them all).
class GuardedBuffers {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr char kGuardByte = 0x5A;

  explicit GuardedBuffers(const std::vector<size_t>& caps) : caps_(caps) {
    size_t bytes = 0;
    for (size_t c : caps_) bytes += c + 2 * kGuard;
    mem_.assign(bytes, kGuardByte);
    for (size_t i = 0, o = 0; i < caps_.size(); o += caps_[i++] + 2 * kGuard) {
      offsets_.push_back(o + kGuard);
      std::fill(mem_.begin() + long(o + kGuard), mem_.begin() + long(o + kGuard + caps_[i]), 0);
    }
  }
  char* data(size_t i) { return mem_.data() + offsets_[i]; }
  size_t cap(size_t i) const { return caps_[i]; }
  void* base() { return mem_.data(); }
  size_t bytes() const { return mem_.size(); }
  // Empty, or which guard was written.
  std::string damage() const {
    for (size_t i = 0; i < caps_.size(); ++i)
      for (size_t g = 0; g < kGuard; ++g) {
        if (mem_[offsets_[i] - kGuard + g] != kGuardByte) return "wrote before buffer " + std::to_string(i);
        if (mem_[offsets_[i] + caps_[i] + g] != kGuardByte) return "wrote after buffer " + std::to_string(i);
      }
    return "";
  }

 private:
  std::vector<size_t> caps_, offsets_;
  std::vector<char> mem_;
};

// Receives as NCCL posts them: 1-4 of 1-3 buffers (tags 0..2) each, capacities from 0 to 300,000
// bytes, in GuardedBuffers registered with the receive comm, now and then flagged LL.
struct FuzzRecv {
  void* req = nullptr;
  int n = 0;
  size_t first = 0;           // its first buffer's index in the GuardedBuffers
  std::vector<char> want[3];  // what a receive that completes holds, where a test knows
  bool done = false;
};
struct FuzzReceives {
  std::vector<FuzzRecv> recvs;
  std::unique_ptr<GuardedBuffers> bufs;
  void* mh = nullptr;
  // Receives posted and not done.
  long open() const {
    return std::count_if(recvs.begin(), recvs.end(), [](const FuzzRecv& p) { return p.req && !p.done; });
  }
};
// Success, or the error of the irecv that failed (the receives after it not posted).
inline ncclResult_t post_fuzz_receives(client::PluginNet& net, void* rc, Rng& r, FuzzReceives* out) {
  out->recvs.resize(1 + r.below(4));
  std::vector<size_t> caps;
  for (auto& p : out->recvs) {
    p.n = 1 + int(r.below(3));
    p.first = caps.size();
    for (int j = 0; j < p.n; ++j) caps.push_back(r.pick<size_t>({0, 1, 100, 4096, 65536, 300000}));
  }
  out->bufs = std::make_unique<GuardedBuffers>(caps);
  GuardedBuffers& b = *out->bufs;
  if (const ncclResult_t e = net.reg_mr(rc, b.base(), b.bytes(), NCCL_PTR_HOST, &out->mh); e != ncclSuccess) return e;
  for (auto& p : out->recvs) {
    void* data[3];
    size_t sizes[3];
    int tags[3];
    void* mhs[3];
    for (int j = 0; j < p.n; ++j) {
      data[j] = b.data(p.first + size_t(j));
      sizes[j] = b.cap(p.first + size_t(j));
      tags[j] = j;
      mhs[j] = out->mh;
    }
    const ncclResult_t e = net.irecv(rc, p.n, data, sizes, tags, mhs, r.one_in(6), &p.req);
    EXPECT_TRUE(ok_or_remote(e)) << e;
    if (e != ncclSuccess) return e;
  }
  return ncclSuccess;
}

// Tests the posted receives, as NCCL's proxy does, until every one is done, the comm fails or
// `seconds` have passed; `failed`: an error the comm already returned. Each answer is success or
// a peer's error, each completion within its capacities, and on_done(recv, sizes) sees it
// (*completions counts them). Once failed, every open receive returns the same error. Returns
// success or that error.
template <class OnDone>
ncclResult_t test_fuzz_receives(client::PluginNet& net, FuzzReceives& fr, ncclResult_t failed, double seconds,
                                int* completions, OnDone on_done) {
  for (const double end = now_s() + seconds; now_s() < end && failed == ncclSuccess && fr.open() > 0;) {
    for (auto& p : fr.recvs) {
      if (!p.req || p.done) continue;
      int done = 0, sizes[3] = {-1, -1, -1};
      const ncclResult_t e = net.test(p.req, &done, sizes);
      EXPECT_TRUE(ok_or_remote(e)) << e;
      if (e != ncclSuccess) {
        failed = e;
        break;
      }
      if (!done) continue;
      p.done = true;
      ++*completions;
      for (int j = 0; j < p.n; ++j) {
        EXPECT_GE(sizes[j], 0);
        EXPECT_LE(size_t(sizes[j]), fr.bufs->cap(p.first + size_t(j))) << "more bytes reported than the receive takes";
      }
      on_done(p, sizes);
    }
  }
  if (failed != ncclSuccess) {
    for (auto& p : fr.recvs) {  // a failed comm fails every later call
      if (!p.req || p.done) continue;
      int done = 0;
      EXPECT_EQ(net.test(p.req, &done, nullptr), failed);
      EXPECT_EQ(done, 0);
    }
  }
  return failed;
}

// Closes the receive comm after a hostile peer: promptly, nothing written outside the receives.
inline void close_fuzz_receives(client::PluginNet& net, void* rc, FuzzReceives& fr) {
  const double t0 = now_s();
  EXPECT_EQ(net.dereg_mr(rc, fr.mh), ncclSuccess);
  EXPECT_EQ(net.close_recv(rc), ncclSuccess);
  EXPECT_LT(now_s() - t0, 5.0) << "close waited on the hostile peer";
  EXPECT_EQ(fr.bufs->damage(), "");
}

struct FuzzSend {
  size_t size;
  int tag;
};

// The isends NCCL would make from src (in order, each again while the plugin returns no request)
// and their tests, until every one is done, the comm fails or `seconds` have passed: success or
// the error that failed it (a send larger than its receive may, ncclInvalidUsage). *finished: the
// sends done.
inline ncclResult_t drive_sends(client::PluginNet& net, void* sc, char* src, void* mh, const std::vector<FuzzSend>& sends,
                                double seconds, size_t* finished) {
  std::vector<void*> reqs;
  size_t posted = 0;
  *finished = 0;
  for (const double end = now_s() + seconds; now_s() < end && *finished < sends.size();) {
    if (posted < sends.size()) {
      void* req = nullptr;
      const ncclResult_t e = net.isend(sc, src, sends[posted].size, sends[posted].tag, mh, &req);
      EXPECT_TRUE(ok_or_remote(e) || e == ncclInvalidUsage) << e;
      if (e != ncclSuccess) return e;
      if (req) {
        reqs.push_back(req);
        ++posted;
      }
    }
    for (auto& q : reqs) {
      if (!q) continue;
      int done = 0, size = -1;
      const ncclResult_t e = net.test(q, &done, &size);
      EXPECT_TRUE(ok_or_remote(e)) << e;
      if (e != ncclSuccess) return e;
      if (done) {
        q = nullptr;
        ++*finished;
      }
    }
  }
  return ncclSuccess;
}

}  // namespace zipccl::test
