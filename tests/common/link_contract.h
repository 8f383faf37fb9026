// The Link contract (common/transport.h) as tests every transport must pass: a test file defines
// a LinkPairFactory for its transport and instantiates LinkContract with it. Each test connects a
// sending and a receiving link through the transport's real listen/connect, then moves messages
// the way the engine does: clear-to-sends posted by the receiver, messages into their placements
// in (seq, sub) order, arrivals with the headers the sender gave.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport.h"

namespace zipccl::test {

struct LinkPair {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Link> send, recv;
};
using LinkPairFactory = std::function<LinkPair()>;

// Connects a pair through t's device 0; the test fails (and the links stay null) on an error or
// after 20 s.
inline LinkPair connect_pair(std::unique_ptr<Transport> t) {
  LinkPair p;
  p.transport = std::move(t);
  uint8_t handle[kTransportHandleBytes] = {};
  std::unique_ptr<Listener> l;
  std::unique_ptr<Connector> c;
  EXPECT_EQ(p.transport->listen(0, handle, &l), ncclSuccess);
  EXPECT_EQ(p.transport->connect(0, handle, -1, &c), ncclSuccess);
  if (!l || !c) return p;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((!p.send || !p.recv) && std::chrono::steady_clock::now() < end) {
    if (!p.send && c->progress(&p.send) != ncclSuccess) break;
    if (!p.recv && l->accept(&p.recv) != ncclSuccess) break;
  }
  EXPECT_TRUE(p.send && p.recv) << "link setup failed or timed out";
  return p;
}

class LinkContract : public ::testing::TestWithParam<LinkPairFactory> {
 protected:
  void SetUp() override {
    pair_ = GetParam()();
    ASSERT_TRUE(pair_.send && pair_.recv);
    // Registered like NCCL's buffers: the receiver's arena and staging, the sender's source.
    recv_arena_.assign(kArena, 0);
    staging_.assign(kArena, 0);
    send_arena_.resize(kArena);
    for (size_t i = 0; i < kArena; ++i) send_arena_[i] = char(i * 131 + 7);
    ASSERT_EQ(recv().reg_mem(recv_arena_.data(), kArena, &regs_[0]), ncclSuccess);
    ASSERT_EQ(recv().reg_mem(staging_.data(), kArena, &regs_[1]), ncclSuccess);
    ASSERT_EQ(send().reg_mem(send_arena_.data(), kArena, &regs_[2]), ncclSuccess);
  }
  void TearDown() override {
    for (auto& r : regs_) r.reset();
  }

  Link& send() { return *pair_.send; }
  Link& recv() { return *pair_.recv; }

  // Progresses both ends until done() or 20 s; false then, or on an error of either.
  bool until(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      if (std::chrono::steady_clock::now() > end) return false;
      if (send().progress() != ncclSuccess || recv().progress() != ncclSuccess) return false;
    }
    return true;
  }
  bool take_cts(ClearToSend* cts) {
    bool got = false;
    return until([&] { return send().poll_cts(cts, &got) == ncclSuccess && got; }) && got;
  }
  bool take_arrival(MessageHeader* h) {
    bool got = false;
    return until([&] { return recv().poll_arrival(h, &got) == ncclSuccess && got; }) && got;
  }

  // n transfers that outlive the links, as the engine keeps its requests' (transport.h): a test
  // may end with one still on a link's threads (a failed receive's sender) or leave by an ASSERT.
  Xfer* xfers(size_t n = 1) {
    xfers_.push_back(std::make_unique<Xfer[]>(n));
    return xfers_.back().get();
  }

  static constexpr size_t kArena = 4 << 20;
  std::vector<char> recv_arena_, staging_, send_arena_;
  std::unique_ptr<MemReg> regs_[3];
  std::vector<std::unique_ptr<Xfer[]>> xfers_;
  // Last, so destroyed first: the links' threads may still be moving the buffers' bytes.
  LinkPair pair_;
};

// Raw messages of every size class land byte for byte in their targets; the sender's Xfer
// completes, its link time (taken up, last piece through) after the post; each arrival names its
// placement and sizes.
TEST_P(LinkContract, RawMessagesLandInTheirTargets) {
  const size_t sizes[] = {0, 1, 4097, 300001, 1 << 20};
  size_t off = 0;
  for (uint32_t seq = 0; seq < std::size(sizes); ++seq) {
    ClearToSend cts;
    cts.seq = seq;
    cts.n = 1;
    cts.p[0].tag = int32_t(seq);
    cts.p[0].capacity = sizes[seq];
    cts.p[0].target = reinterpret_cast<uintptr_t>(recv_arena_.data() + off);
    ASSERT_EQ(recv().post_cts(cts), ncclSuccess);
    ClearToSend got;
    ASSERT_TRUE(take_cts(&got)) << send().error_text();
    ASSERT_EQ(got.seq, seq);
    ASSERT_EQ(got.n, 1u);
    EXPECT_EQ(got.p[0].tag, int32_t(seq));
    EXPECT_EQ(got.p[0].capacity, sizes[seq]);
    EXPECT_EQ(got.p[0].staging_bytes, 0u);
    MessageHeader h;
    h.seq = seq;
    h.wire_bytes = h.orig_bytes = sizes[seq];
    Xfer& x = *xfers();
    const int64_t posted = now_ns();
    ASSERT_EQ(send().post_message(h, got.p[0], send_arena_.data() + off, &x), ncclSuccess);
    MessageHeader a;
    ASSERT_TRUE(take_arrival(&a)) << recv().error_text();
    ASSERT_TRUE(until([&] { return x.done(); }));
    const int64_t taken = x.start_ns.load(), end = x.end_ns.load();
    if (sizes[seq] > 0) {
      EXPECT_GE(end, posted) << "size " << sizes[seq];
    }
    if (taken != 0) {
      EXPECT_GE(taken, posted) << "size " << sizes[seq];
      EXPECT_LE(taken, end) << "size " << sizes[seq];
    }
    EXPECT_EQ(a.seq, seq);
    EXPECT_EQ(a.sub, 0u);
    EXPECT_FALSE(a.compressed);
    EXPECT_EQ(a.wire_bytes, sizes[seq]);
    EXPECT_EQ(a.orig_bytes, sizes[seq]);
    EXPECT_EQ(std::memcmp(recv_arena_.data() + off, send_arena_.data() + off, sizes[seq]), 0) << "size " << sizes[seq];
    off += sizes[seq];
  }
}

// A grouped clear-to-send: messages go out in sub order, compressed ones into staging, raw ones
// into their targets (each saying why it went raw, every RawWhy), and nothing lands anywhere else.
TEST_P(LinkContract, GroupedPlacementsRawAndCompressed) {
  constexpr uint32_t kN = kMaxRecvs;
  constexpr size_t kCap = 100000;
  ClearToSend cts;
  cts.seq = 0;
  cts.n = kN;
  for (uint32_t i = 0; i < kN; ++i) {
    Placement& p = cts.p[i];
    p.tag = int32_t(100 + i);
    p.capacity = kCap;
    p.target = reinterpret_cast<uintptr_t>(recv_arena_.data() + i * kCap);
    if (i % 2) {
      p.staging = reinterpret_cast<uintptr_t>(staging_.data() + i * kCap);
      p.staging_bytes = kCap;
    }
  }
  ASSERT_EQ(recv().post_cts(cts), ncclSuccess);
  ClearToSend got;
  ASSERT_TRUE(take_cts(&got));
  ASSERT_EQ(got.n, kN);
  Xfer* x = xfers(kN);
  for (uint32_t i = 0; i < kN; ++i) {
    EXPECT_EQ(got.p[i].tag, int32_t(100 + i));
    EXPECT_EQ(got.p[i].staging_bytes, i % 2 ? kCap : 0u);
    MessageHeader h;
    h.sub = i;
    h.compressed = i % 2;
    if (!h.compressed) h.why = RawWhy(i / 2 % kRawWhyValues);
    h.wire_bytes = 1000 * (i + 1);
    h.orig_bytes = h.compressed ? 0 : h.wire_bytes;
    ASSERT_EQ(send().post_message(h, got.p[i], send_arena_.data() + i * kCap, &x[i]), ncclSuccess);
  }
  uint32_t seen = 0;
  for (uint32_t k = 0; k < kN; ++k) {
    MessageHeader a;
    ASSERT_TRUE(take_arrival(&a)) << recv().error_text();
    ASSERT_LT(a.sub, kN);
    EXPECT_FALSE(seen >> a.sub & 1) << "sub " << a.sub << " arrived twice";
    seen |= 1u << a.sub;
    EXPECT_EQ(a.compressed, a.sub % 2 == 1);
    EXPECT_EQ(a.why, a.compressed ? RawWhy::kUnsaid : RawWhy(a.sub / 2 % kRawWhyValues)) << "sub " << a.sub;
    EXPECT_EQ(a.wire_bytes, 1000u * (a.sub + 1));
    const char* landed = (a.compressed ? staging_.data() : recv_arena_.data()) + a.sub * kCap;
    const char* untouched = (a.compressed ? recv_arena_.data() : staging_.data()) + a.sub * kCap;
    EXPECT_EQ(std::memcmp(landed, send_arena_.data() + a.sub * kCap, a.wire_bytes), 0) << "sub " << a.sub;
    EXPECT_EQ(untouched[0], 0) << "sub " << a.sub << " also wrote where it should not";
    EXPECT_EQ(landed[a.wire_bytes], 0) << "sub " << a.sub << " wrote past its bytes";
  }
  for (uint32_t i = 0; i < kN; ++i) ASSERT_TRUE(until([&] { return x[i].done(); }));
}

// Many receives in flight, their sequence numbers wrapping every slot ring a transport keeps;
// arrivals in any order, each once.
TEST_P(LinkContract, ManyReceivesInFlight) {
  constexpr uint32_t kMsgs = 300, kInflight = kMaxRequests;
  constexpr size_t kSize = 8192;
  uint32_t posted = 0, taken = 0, arrived = 0, done_prefix = 0;
  std::vector<bool> seen(kMsgs);
  std::vector<Xfer*> xs;
  while (arrived < kMsgs) {
    // A receive slot is reused only once its message, and every one before it, has arrived.
    while (done_prefix < kMsgs && seen[done_prefix]) ++done_prefix;
    while (posted < kMsgs && posted - done_prefix < kInflight) {
      ClearToSend cts;
      cts.seq = posted;
      cts.n = 1;
      cts.p[0].capacity = kSize;
      cts.p[0].target = reinterpret_cast<uintptr_t>(recv_arena_.data() + (posted % kInflight) * kSize);
      ASSERT_EQ(recv().post_cts(cts), ncclSuccess) << recv().error_text();
      ++posted;
    }
    ASSERT_EQ(send().progress(), ncclSuccess) << send().error_text();
    ASSERT_EQ(recv().progress(), ncclSuccess) << recv().error_text();
    ClearToSend got;
    bool have = false;
    ASSERT_EQ(send().poll_cts(&got, &have), ncclSuccess);
    if (have) {
      ASSERT_EQ(got.seq, taken);
      MessageHeader h;
      h.seq = taken;
      h.wire_bytes = h.orig_bytes = kSize;
      xs.push_back(xfers());
      ASSERT_EQ(send().post_message(h, got.p[0], send_arena_.data() + (taken % 64) * kSize, xs.back()), ncclSuccess);
      ++taken;
    }
    MessageHeader a;
    bool got_a = false;
    ASSERT_EQ(recv().poll_arrival(&a, &got_a), ncclSuccess) << recv().error_text();
    if (got_a) {
      ASSERT_LT(a.seq, taken);
      ASSERT_FALSE(seen[a.seq]) << "message " << a.seq << " arrived twice";
      seen[a.seq] = true;
      ASSERT_EQ(std::memcmp(recv_arena_.data() + (a.seq % kInflight) * kSize, send_arena_.data() + (a.seq % 64) * kSize, kSize), 0)
          << "message " << a.seq;
      ++arrived;
    }
  }
  for (Xfer* x : xs) ASSERT_TRUE(until([&] { return x->done(); }));
}

// A message larger than its placement (a sender that ignores the capacity it was given) fails the
// receiving link with a clear error, whatever the bytes.
TEST_P(LinkContract, MessageThatDoesNotFitFailsTheReceiver) {
  ClearToSend cts;
  cts.n = 1;
  cts.p[0].capacity = 1000;
  cts.p[0].target = reinterpret_cast<uintptr_t>(recv_arena_.data());
  ASSERT_EQ(recv().post_cts(cts), ncclSuccess);
  ClearToSend got;
  ASSERT_TRUE(take_cts(&got));
  got.p[0].capacity = 2000;  // forged
  MessageHeader h;
  h.wire_bytes = h.orig_bytes = 2000;
  Xfer& x = *xfers();
  ASSERT_EQ(send().post_message(h, got.p[0], send_arena_.data(), &x), ncclSuccess);
  MessageHeader a;
  bool arrived = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && !arrived && std::chrono::steady_clock::now() < end) {
    send().progress();
    r = recv().progress();
    if (r == ncclSuccess) r = recv().poll_arrival(&a, &arrived);
  }
  EXPECT_FALSE(arrived);
  EXPECT_EQ(r, ncclRemoteError);
  EXPECT_EQ(recv().error(), ncclRemoteError) << "the error is sticky";
  EXPECT_NE(recv().error_text().find("does not fit the receive"), std::string::npos) << recv().error_text();
}

// The sender goes right after its message: the message still arrives whole, and peer_closed()
// stays false until it has been taken. A receive posted after that ends, within seconds, in
// peer_closed() or in an error of the link: never in waiting forever.
TEST_P(LinkContract, PeerClosedOnlyAfterEverythingArrived) {
  ClearToSend cts;
  cts.n = 1;
  cts.p[0].capacity = 1 << 20;
  cts.p[0].target = reinterpret_cast<uintptr_t>(recv_arena_.data());
  ASSERT_EQ(recv().post_cts(cts), ncclSuccess);
  ClearToSend got;
  ASSERT_TRUE(take_cts(&got));
  MessageHeader h;
  h.wire_bytes = h.orig_bytes = 1 << 20;
  Xfer& x = *xfers();
  ASSERT_EQ(send().post_message(h, got.p[0], send_arena_.data(), &x), ncclSuccess);
  ASSERT_TRUE(until([&] { return x.done(); }));
  regs_[2].reset();
  pair_.send.reset();
  MessageHeader a;
  bool arrived = false;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!arrived && std::chrono::steady_clock::now() < end) {
    ASSERT_EQ(recv().progress(), ncclSuccess) << recv().error_text();
    ASSERT_EQ(recv().poll_arrival(&a, &arrived), ncclSuccess) << recv().error_text();
    if (!arrived) {
      EXPECT_FALSE(recv().peer_closed()) << "a message was still on its way";
    }
  }
  ASSERT_TRUE(arrived);
  EXPECT_EQ(std::memcmp(recv_arena_.data(), send_arena_.data(), 1 << 20), 0);
  cts.seq = 1;
  ASSERT_EQ(recv().post_cts(cts), ncclSuccess);
  arrived = false;
  end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && !recv().peer_closed() && std::chrono::steady_clock::now() < end) {
    r = recv().progress();
    if (r == ncclSuccess) r = recv().poll_arrival(&a, &arrived);
  }
  EXPECT_TRUE(r != ncclSuccess || recv().peer_closed()) << "the receive would wait forever";
  EXPECT_FALSE(arrived);
}

}  // namespace zipccl::test
