// Messages sent before their clear-to-send (kEager, Link::post_eager): what a sending link puts on
// the control socket, and how a receiving link places what a peer sends ahead, or refuses it.
// Links over socket pairs, the peer played by the test reading and writing raw bytes.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "raw_peer.h"

namespace zipccl::tcp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kEagerRaw = kInline | kEager;

// Message `index` sent ahead with `tag`, as the peer writes it.
std::vector<char> eager_record(uint32_t index, int32_t tag, const std::vector<char>& msg, uint32_t flags = kEagerRaw) {
  const HeaderRecord h{kHeader, index, uint32_t(tag), flags, msg.size(), msg.size()};
  return header_record(h, msg, uint32_t(sizeof h + msg.size()));
}

// A receiving link whose peer the test plays.
struct Receiver {
  Pair p;
  SocketLink link{{p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(kMaxInline), 0};
  uint32_t next_seq = 0;

  // Posts one receive: raw bytes into targets[i] for tags[i].
  ncclResult_t post(const std::vector<std::vector<char>*>& targets, const std::vector<int32_t>& tags) {
    ClearToSend cts{};
    cts.seq = next_seq++;
    cts.n = uint32_t(targets.size());
    for (size_t i = 0; i < targets.size(); ++i) {
      cts.p[i].tag = tags[i];
      cts.p[i].capacity = targets[i]->size();
      cts.p[i].target = reinterpret_cast<uintptr_t>(targets[i]->data());
    }
    return link.post_cts(cts);
  }
  // Arrivals until `n` have come, an error, or 2 s; with wait_full, polls the full time (to see
  // that nothing comes).
  std::vector<MessageHeader> arrivals(size_t n, bool wait_full = false) {
    std::vector<MessageHeader> got;
    const auto end = Clock::now() + std::chrono::milliseconds(wait_full ? 200 : 2000);
    while (Clock::now() < end && (wait_full || got.size() < n)) {
      MessageHeader h;
      bool one = false;
      if (link.progress() != ncclSuccess || link.poll_arrival(&h, &one) != ncclSuccess) break;
      if (one) got.push_back(h);
    }
    return got;
  }
};

TEST(Eager, WaitsUnreadUntilItsReceiveIsPosted) {
  Receiver r;
  const std::vector<char> m0 = pattern(1000, 1), m1 = pattern(3000, 2);
  std::vector<char> t0(1000, 0), t1(4096, 0);
  write_all(r.p.ctrl[1], eager_record(0, 3, m0));
  write_all(r.p.ctrl[1], eager_record(1, 3, m1));
  EXPECT_TRUE(r.arrivals(1, true).empty()) << "nothing posted: nothing lands";
  ASSERT_EQ(r.post({&t0}, {3}), ncclSuccess);
  std::vector<MessageHeader> got = r.arrivals(1);
  ASSERT_EQ(got.size(), 1u) << r.link.error_text();
  EXPECT_EQ(got[0].seq, 0u);
  EXPECT_EQ(got[0].sub, 0u);
  EXPECT_FALSE(got[0].compressed);
  EXPECT_EQ(got[0].wire_bytes, 1000u);
  EXPECT_EQ(t0, m0);
  EXPECT_TRUE(r.arrivals(1, true).empty()) << "message 1 waits for receive 1";
  EXPECT_EQ(t1, std::vector<char>(4096, 0));
  ASSERT_EQ(r.post({&t1}, {3}), ncclSuccess);
  got = r.arrivals(1);
  ASSERT_EQ(got.size(), 1u) << r.link.error_text();
  EXPECT_EQ(got[0].seq, 1u);
  EXPECT_TRUE(std::equal(m1.begin(), m1.end(), t1.begin()));
  EXPECT_EQ(std::count(t1.begin() + 3000, t1.end(), 0), 1096);
}

// A grouped receive takes messages sent ahead by tag, each into the first placement with its tag
// that no earlier message filled; a message with a header of its own after them fills the rest.
TEST(Eager, GroupedReceiveMatchedByTagInOrder) {
  Receiver r;
  std::vector<char> a(500, 0), b(500, 0), c(500, 0), d(20000, 0);
  ASSERT_EQ(r.post({&a, &b, &c, &d}, {5, 7, 5, 9}), ncclSuccess);
  const std::vector<char> m0 = pattern(100, 3), m1 = pattern(200, 4), m2 = pattern(300, 5), m3 = pattern(20000, 6);
  write_all(r.p.ctrl[1], eager_record(0, 5, m0));
  write_all(r.p.ctrl[1], eager_record(1, 5, m1));
  write_all(r.p.ctrl[1], eager_record(2, 7, m2));
  write_all(r.p.ctrl[1], header_record({kHeader, 0, 3, 0, m3.size(), m3.size()}, {}, 32));
  write_all(r.p.data[1], m3);
  std::vector<MessageHeader> got = r.arrivals(4);
  ASSERT_EQ(got.size(), 4u) << r.link.error_text();
  std::vector<uint32_t> subs;
  for (const MessageHeader& h : got) subs.push_back(h.sub);
  std::sort(subs.begin(), subs.end());
  EXPECT_EQ(subs, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(std::equal(m0.begin(), m0.end(), a.begin()));
  EXPECT_TRUE(std::equal(m1.begin(), m1.end(), c.begin()));
  EXPECT_TRUE(std::equal(m2.begin(), m2.end(), b.begin()));
  EXPECT_EQ(d, m3);
}

// What a peer may not send ahead: each fails the link with what was wrong, and writes nothing.
struct BadCase {
  const char* name;
  std::vector<char> record;
  const char* expect;
};

TEST(Eager, WhatCannotBePlacedFailsTheLink) {
  const std::vector<char> m = pattern(1000, 7);
  const BadCase cases[] = {
      {"TagOfNoPlacement", eager_record(0, 4, m), "matches no open receive of seq 0 (tags 3): collective mismatch"},
      {"LargerThanItsReceive", eager_record(0, 3, pattern(2000, 8)), "does not fit the receive"},
      {"Compressed", eager_record(0, 3, m, kEagerRaw | kCompressed), "is not raw inside its header"},
      {"NotInline", header_record({kHeader, 0, 3, kEager, 1000, 1000}, {}, 32), "is not raw inside its header"},
      {"IndexOfAFilledReceive", eager_record(uint32_t(-1), 3, m), "for no posted receive"},
      {"FurtherAheadThanASenderGoes", eager_record(1 + kMaxRequests, 3, m), "32 beyond the receives posted"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    Receiver r;
    std::vector<char> target(1000, 0);
    ASSERT_EQ(r.post({&target}, {3}), ncclSuccess);
    write_all(r.p.ctrl[1], c.record);
    EXPECT_TRUE(r.arrivals(1).empty());
    EXPECT_EQ(r.link.error(), ncclRemoteError);
    EXPECT_NE(r.link.error_text().find(c.expect), std::string::npos) << r.link.error_text();
    EXPECT_EQ(target, std::vector<char>(1000, 0));
  }
}

// The sending end: post_eager puts one record on the control socket (index as seq, tag as sub,
// the bytes after it), within the link's bounds; a link without eager sends offers none.
TEST(Eager, SenderWritesIndexTagAndBytes) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(4096), 2);
  EXPECT_EQ(link.eager_bytes(), 4096u);
  EXPECT_EQ(link.eager_ahead(), 2u);
  const std::vector<char> msg = pattern(4096, 9);
  Xfer x;
  ASSERT_EQ(link.post_eager(41, -7, msg.data(), msg.size(), RawWhy::kSmall, false, &x), ncclSuccess);
  while (!x.done()) ASSERT_EQ(link.progress(), ncclSuccess) << link.error_text();
  const std::vector<char> rec = read_exactly(p.ctrl[1], 4 + sizeof(HeaderRecord) + msg.size());
  ASSERT_EQ(rec.size(), 4 + sizeof(HeaderRecord) + msg.size());
  HeaderRecord h;
  std::memcpy(&h, rec.data() + 4, sizeof h);
  EXPECT_EQ(h.seq, 41u);
  EXPECT_EQ(int32_t(h.sub), -7);
  EXPECT_EQ(h.flags, uint32_t(kInline | kEager | uint32_t(RawWhy::kSmall) << kRawWhyShift));
  EXPECT_EQ(h.wire_bytes, msg.size());
  EXPECT_TRUE(std::equal(msg.begin(), msg.end(), rec.begin() + 4 + long(sizeof h)));
  EXPECT_EQ(link.post_eager(42, 0, msg.data(), 4097, RawWhy::kSmall, false, &x), ncclInternalError);

  Pair q;
  SocketLink none({q.ctrl[0], q.data[0]}, "test-peer", nullptr, 1000, InlineRule(4096), 0);
  EXPECT_EQ(none.eager_bytes(), 0u);
}

}  // namespace
}  // namespace zipccl::tcp
