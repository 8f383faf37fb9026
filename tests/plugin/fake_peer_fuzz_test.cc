// The control path against a hostile peer, driven through the plugin's ABI: a fake peer speaks
// the socket transport's wire format (spelled_wire.h) with random, mostly plausible records
// (headers for receives that exist and do not, sizes around the capacities, flags, truncated and
// corrupt payloads, compressed messages the codec made, garbage, early closes) to a receiving
// plugin, and random clear-to-sends to a sending one. Whatever arrives, the plugin must answer with
// success or a remote/system error that stays, never write outside the receive buffers, never
// report more bytes than a receive takes, and close without hanging. Seeds are fixed (the
// iteration number); ZIP_FUZZ_ITERATIONS runs more of them.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "net_client.h"
#include "fuzz_support.h"
#include "pair.h"
#include "spelled_wire.h"
#include "zipccl/codec.h"

using namespace zipccl::client;
using namespace zipccl::test;
using namespace zipccl::test::wire;

namespace {

// Writes all of it unless the socket fails (the plugin closed it): the fake peer does not care.
void put(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    const ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return;
    c += k;
    n -= size_t(k);
  }
}

int dial(const sockaddr_in& a) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A size near the interesting edges of `cap`.
uint64_t size_near(Rng& r, uint64_t cap) {
  switch (r.below(8)) {
    case 0: return 0;
    case 1: return cap;
    case 2: return cap + 1;
    case 3: return cap ? cap - 1 : 0;
    case 4: return r.below(cap + 1);
    case 5: return r.below(1 << 20);
    case 6: return uint64_t(1) << (32 + r.below(31));
    default: return r.below(256);
  }
}

class FakePeerFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ib_run()) GTEST_SKIP() << "speaks the socket transport's wire format";
    // Every receive sends a clear-to-send (no push records), which the fake sender reads.
    setenv("NCCL_ZIP_SOCKET_PUSH", "0", 1);
    ASSERT_EQ(net_.init(), ncclSuccess);
  }
  void TearDown() override {
    if (!ib_run()) {
      EXPECT_EQ(net_.finalize(), ncclSuccess);
    }
  }
  PluginNet net_{ZIP_PLUGIN_PATH, 11};
};

// ---- a receiving plugin ---------------------------------------------------------------------


TEST_F(FakePeerFuzz, HostileSenderNeverBreaksTheReceiver) {
  const int n_iter = fuzz_iterations(60);
  int errors = 0, completions = 0;
  for (int it = 0; it < n_iter; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    Rng r(0xF00D + uint64_t(it));
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void *lc = nullptr, *rc = nullptr;
    ASSERT_EQ(net_.listen(0, handle, &lc), ncclSuccess);
    const auto [addr, nonce] = handle_info(handle);
    int fds[2];
    for (uint16_t i = 0; i < 2; ++i) {
      fds[i] = dial(addr);
      ASSERT_GE(fds[i], 0);
      const Hello h{kHelloMagic, kVersion, i, 2, 0, 0, nonce, 1000 + uint64_t(it)};
      put(fds[i], &h, sizeof h);
    }
    for (const double end = now_s() + 5; !rc && now_s() < end;) ASSERT_EQ(net_.accept(lc, &rc), ncclSuccess);
    ASSERT_NE(rc, nullptr);

    // Receives with guard bytes around every buffer.
    FuzzReceives fr;
    const ncclResult_t sticky = post_fuzz_receives(net_, rc, r, &fr);
    const int n_recv = int(fr.recvs.size());

    // What the plugin offered: its clear-to-sends, read from the control socket.
    std::vector<CtsRecord> offered;
    for (int i = 0; i < n_recv && sticky == ncclSuccess; ++i) {
      uint32_t len = 0;
      CtsRecord c{};
      timeval tv{2, 0};
      setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ASSERT_EQ(recv(fds[0], &len, 4, MSG_WAITALL), 4);
      ASSERT_EQ(len, sizeof c);
      ASSERT_EQ(recv(fds[0], &c, sizeof c, MSG_WAITALL), ssize_t(sizeof c));
      offered.push_back(c);
    }

    // The fake sender's messages, mostly right (raw, or compressed where staging is offered),
    // now and then one of the faults; written by a thread while this one polls the plugin.
    std::vector<char> ctrl, payload;
    const uint64_t fault_odds = 2 + r.below(12);
    for (const CtsRecord& c : offered) {
      for (uint32_t sub = 0; sub < c.n; ++sub) {
        if (r.one_in(10)) continue;  // never sent: the receive stays open
        const CtsEntry& e = c.e[sub];
        const uint64_t cap = e.capacity;
        HeaderRecord h{kHeader, c.seq, sub, 0, 0, 0};
        std::vector<char> body;
        if (e.staging_bytes && r.one_in(2)) {  // a compressed message the codec made
          std::vector<char> src(r.below(cap + 1) & ~uint64_t(1));
          for (auto& x : src) x = char(r.below(4) == 0 ? r.below(256) : 0x3C);
          body.resize(zipccl::max_compressed_bytes(src.size()));
          size_t len = 0;
          if (zipccl::encode(zipccl::Codec::BF16, src.data(), src.size(), body.data(), body.size(), &len) !=
              zipccl::Status::kOk)
            len = 0;
          body.resize(len);
          h.flags = 1;
          h.orig_bytes = src.size();
          h.wire_bytes = body.size();
        } else {
          h.orig_bytes = h.wire_bytes = r.below(cap + 1);
          body.resize(h.wire_bytes);
          for (auto& x : body) x = char(r.below(256));
        }
        uint32_t len = sizeof h;
        if (r.one_in(fault_odds)) {
          switch (r.below(9)) {
            case 0: h.seq = uint32_t(r.below(40)); break;          // a receive that may not exist
            case 1: h.sub = uint32_t(r.below(9)); break;
            case 2: h.orig_bytes = size_near(r, cap); break;       // sizes that disagree
            case 3: h.wire_bytes = size_near(r, cap); break;
            case 4: h.flags = uint32_t(r.below(32)); break;  // eager (0x10) included
            case 5: h.type = uint32_t(r.g()); break;
            case 6: len = uint32_t(r.pick<uint64_t>({0, 3, sizeof h - 1, sizeof h + 4, 5000})); break;
            case 7:  // damaged payload
              if (!body.empty()) body[r.below(body.size())] ^= char(1 + r.below(255));
              break;
            default:  // less or more payload than announced
              if (r.one_in(2)) body.resize(r.below(body.size() + 1));
              else body.insert(body.end(), 1 + r.below(100), 'x');
              break;
          }
        }
        const char* lp = reinterpret_cast<const char*>(&len);
        ctrl.insert(ctrl.end(), lp, lp + 4);
        const char* hp = reinterpret_cast<const char*>(&h);
        ctrl.insert(ctrl.end(), hp, hp + std::min<size_t>(len, sizeof h));
        if (len > sizeof h) ctrl.insert(ctrl.end(), std::min<size_t>(len - sizeof h, 64), char(r.below(256)));
        payload.insert(payload.end(), body.begin(), body.end());
      }
    }
    const bool close_early = r.one_in(8);
    std::thread peer([&] {
      put(fds[0], ctrl.data(), close_early ? ctrl.size() / 2 : ctrl.size());
      put(fds[1], payload.data(), payload.size());
      if (close_early) shutdown(fds[0], SHUT_RDWR);
    });

    // Poll every receive for a while; everything it says must hold.
    if (test_fuzz_receives(net_, fr, sticky, 0.25, &completions, [](const FuzzRecv&, const int*) {}) != ncclSuccess)
      ++errors;
    for (int fd : fds) shutdown(fd, SHUT_RDWR);
    peer.join();
    for (int fd : fds) close(fd);
    close_fuzz_receives(net_, rc, fr);
    EXPECT_EQ(net_.close_listen(lc), ncclSuccess);
  }
  printf("%d iterations: %d failed the link, %d receives completed\n", n_iter, errors, completions);
  EXPECT_GT(errors, 0) << "the fake peer never broke the protocol";
  EXPECT_GT(completions, 0) << "the fake peer never sent a valid message";
}

// ---- a sending plugin -----------------------------------------------------------------------

TEST_F(FakePeerFuzz, HostileReceiverNeverBreaksTheSender) {
  const int n_iter = fuzz_iterations(60);
  int errors = 0, completions = 0;
  for (int it = 0; it < n_iter; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    Rng r(0xBEEF + uint64_t(it));
    // A fake listener and a handle for it in the transport's format.
    const int lfd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(listen(lfd, 16), 0);
    socklen_t alen = sizeof a;
    ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen), 0);
    HandleHead head{kHandleMagic, kVersion, 0, {}, 0, 0x1234 + uint64_t(it)};
    std::memcpy(head.addr, &a, sizeof a);
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    std::memcpy(handle, &head, sizeof head);
    void* sc = nullptr;
    std::vector<int> fds;
    std::atomic<bool> stop{false};
    std::thread acceptor([&] {  // takes the plugin's sockets; reads their hellos
      while (!stop && fds.size() < 2) {
        const int fd = accept(lfd, nullptr, nullptr);
        if (fd < 0) return;
        Hello h;
        if (recv(fd, &h, sizeof h, MSG_WAITALL) != ssize_t(sizeof h)) {
          close(fd);
          continue;
        }
        fds.push_back(fd);
      }
    });
    for (const double end = now_s() + 5; !sc && now_s() < end;) ASSERT_EQ(net_.connect(0, handle, &sc), ncclSuccess);
    acceptor.join();
    ASSERT_NE(sc, nullptr);
    ASSERT_EQ(fds.size(), 2u);

    // Clear-to-sends, mostly well formed (now and then one of the faults), and the isends NCCL
    // would make against them: one per placement, by tag, mostly within its capacity.
    std::vector<char> ctrl;
    std::vector<FuzzSend> sends;
    const int n_cts = 1 + int(r.below(4));
    const uint64_t fault_odds = 2 + r.below(12);
    uint32_t first = 0;
    for (int c = 0; c < n_cts; ++c) {
      CtsRecord rec{};
      rec.type = kCts;
      rec.seq = uint32_t(c);
      rec.n = 1 + uint32_t(r.below(3));
      rec.first = first;
      first += rec.n;
      for (uint32_t i = 0; i < 8; ++i) {
        CtsEntry& e = rec.e[i];
        e.tag = int32_t(i);
        e.capacity = r.below(70000);
        e.flags = uint32_t(r.below(2));
        e.staging_bytes = e.flags ? zipccl::max_compressed_bytes(e.capacity) : 0;
        if (i < rec.n) sends.push_back({r.one_in(20) ? size_t(e.capacity + 1) : size_t(r.below(e.capacity + 1)), e.tag});
      }
      if (r.one_in(5)) {  // receives before it offered nothing: a push first (now and then out of turn)
        // Unbounded (until 0, flags 0), now and then with flags no receiver sends.
        const uint32_t push[5] = {16, kPush, r.one_in(4) ? uint32_t(r.below(8)) : rec.first, 0,
                                  r.one_in(8) ? uint32_t(r.g()) & ~1u : 0u};
        const char* pp = reinterpret_cast<const char*>(push);
        ctrl.insert(ctrl.end(), pp, pp + sizeof push);
        rec.first += uint32_t(r.below(3));  // receives that had no record
        first = rec.first + rec.n;
      }
      uint32_t len = sizeof rec;
      if (r.one_in(fault_odds)) {
        switch (r.below(7)) {
          case 0: rec.type = uint32_t(r.g()); break;
          case 1: rec.seq = uint32_t(r.below(10)); break;
          case 2: rec.n = uint32_t(r.below(12)); break;
          case 3: rec.first += 1 + uint32_t(r.below(5)); break;  // placements out of turn
          case 4: rec.e[r.below(rec.n)].flags = uint32_t(r.g()); break;
          case 5: rec.e[r.below(rec.n)].staging_bytes = size_near(r, 70000); break;
          default: len = uint32_t(r.pick<uint64_t>({0, 8, sizeof rec - 1, sizeof rec + 8})); break;
        }
      }
      const char* lp = reinterpret_cast<const char*>(&len);
      ctrl.insert(ctrl.end(), lp, lp + 4);
      const char* rp = reinterpret_cast<const char*>(&rec);
      ctrl.insert(ctrl.end(), rp, rp + std::min<size_t>(len, sizeof rec));
      if (len > sizeof rec) ctrl.insert(ctrl.end(), len - sizeof rec, 0);
    }
    std::thread peer([&] {  // sends the records, then drains what the plugin sends
      put(fds[0], ctrl.data(), ctrl.size());
      char sink[65536];
      while (!stop) {
        bool any = false;
        for (int fd : fds) {
          const ssize_t k = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
          any |= k > 0;
          if (k == 0) return;
        }
        if (!any) usleep(200);
      }
    });

    std::vector<char> src(200000);
    for (auto& c : src) c = char(r.below(4) ? 0x3C : r.below(256));
    void* mh = nullptr;
    ASSERT_EQ(net_.reg_mr(sc, src.data(), src.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
    size_t finished = 0;
    const ncclResult_t sticky = drive_sends(net_, sc, src.data(), mh, sends, 0.25, &finished);
    completions += int(finished);
    if (sticky != ncclSuccess) {
      ++errors;
      void* req = nullptr;
      EXPECT_EQ(net_.isend(sc, src.data(), 10, 0, mh, &req), sticky) << "a failed comm fails every later call";
    }
    stop = true;
    for (int fd : fds) shutdown(fd, SHUT_RDWR);
    peer.join();
    const double t0 = now_s();
    EXPECT_EQ(net_.dereg_mr(sc, mh), ncclSuccess);
    EXPECT_EQ(net_.close_send(sc), ncclSuccess);
    EXPECT_LT(now_s() - t0, 5.0) << "close waited on the hostile peer";
    for (int fd : fds) close(fd);
    close(lfd);
  }
  printf("%d iterations: %d failed the link, %d sends completed\n", n_iter, errors, completions);
  EXPECT_GT(errors, 0) << "the fake receiver never broke the protocol";
  EXPECT_GT(completions, 0) << "the fake receiver never let a send through";
}

}  // namespace
