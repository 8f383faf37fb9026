// Receives that offer no staging let the sender push (kPush): what a receiving link tells its
// peer, and when; how it places pushed messages of any size; what a sending link takes from a
// receiver that pushes, and what it refuses. Links over socket pairs, the peer played by the test.
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "raw_peer.h"

namespace zipccl::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// A receiving link that lets its sender push, its receives numbered in order.
struct Receiver {
  Pair p;
  SocketLink link{{p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(kMaxInline), 8, true};
  uint32_t next_seq = 0;

  // One receive of one placement into *target; with `offer`, staging for compressed bytes, else
  // pushable (with `pushable` false: a receive that declines now but may offer later).
  ncclResult_t post(std::vector<char>* target, int32_t tag, bool offer = false, bool pushable = true,
                    uint32_t push_ahead = kPushAny) {
    ClearToSend cts{};
    cts.seq = next_seq++;
    cts.pushable = !offer && pushable;
    cts.push_ahead = push_ahead;
    cts.n = 1;
    cts.p[0].tag = tag;
    cts.p[0].capacity = target->size();
    cts.p[0].target = reinterpret_cast<uintptr_t>(target->data());
    if (offer) {
      cts.p[0].staging_bytes = target->size() + 64;
      cts.p[0].staging = cts.p[0].target;  // never written: the test sends raw messages only
    }
    return link.post_cts(cts);
  }
  std::vector<MessageHeader> arrivals(size_t n) {
    std::vector<MessageHeader> got;
    const auto end = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < end && got.size() < n) {
      MessageHeader h;
      bool one = false;
      if (link.progress() != ncclSuccess || link.poll_arrival(&h, &one) != ncclSuccess) break;
      if (one) got.push_back(h);
    }
    return got;
  }
};

// The next control record the link sent (length, then its bytes); empty if none is there.
std::vector<char> next_record(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  uint32_t len = 0;
  const ssize_t r = read(fd, &len, 4);
  fcntl(fd, F_SETFL, flags);
  if (r != 4) return {};
  return read_exactly(fd, len);
}

std::vector<char> record(const void* r, size_t n) {
  std::vector<char> b(4 + n);
  const uint32_t len = uint32_t(n);
  std::memcpy(b.data(), &len, 4);
  std::memcpy(b.data() + 4, r, n);
  return b;
}

std::vector<char> eager(uint32_t index, int32_t tag, size_t bytes, bool inline_bytes, const std::vector<char>& msg) {
  const uint32_t flags = kEager | (inline_bytes ? uint32_t(kInline) : 0u);
  return header_record({kHeader, index, uint32_t(tag), flags, bytes, bytes}, inline_bytes ? msg : std::vector<char>{},
                       uint32_t(sizeof(HeaderRecord) + (inline_bytes ? msg.size() : 0)));
}

TEST(Push, SaidOnceWhenReceivesStopOfferingAndEndedByAnOffer) {
  Receiver r;
  std::vector<char> t[6];
  for (auto& b : t) b.assign(4096, 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(r.post(&t[i], 0), ncclSuccess);
  std::vector<char> rec = next_record(r.p.ctrl[1]);
  ASSERT_EQ(rec.size(), sizeof(PushRecord));
  PushRecord push;
  std::memcpy(&push, rec.data(), sizeof push);
  EXPECT_EQ(push.type, uint32_t(kPush));
  EXPECT_EQ(push.first, 0u);
  EXPECT_TRUE(next_record(r.p.ctrl[1]).empty()) << "nothing for the receives after it";

  ASSERT_EQ(r.post(&t[3], 0, true), ncclSuccess);
  rec = next_record(r.p.ctrl[1]);
  ASSERT_EQ(rec.size(), sizeof(CtsRecord));
  CtsRecord cts;
  std::memcpy(&cts, rec.data(), sizeof cts);
  EXPECT_EQ(cts.type, uint32_t(kCts));
  EXPECT_EQ(cts.seq, 3u);
  EXPECT_EQ(cts.first, 3u);
  EXPECT_EQ(cts.e[0].flags, uint32_t(kCompressOk));

  ASSERT_EQ(r.post(&t[4], 0), ncclSuccess);
  ASSERT_EQ(r.post(&t[5], 0), ncclSuccess);
  rec = next_record(r.p.ctrl[1]);
  ASSERT_EQ(rec.size(), sizeof(PushRecord));
  std::memcpy(&push, rec.data(), sizeof push);
  EXPECT_EQ(push.first, 4u);
  EXPECT_TRUE(next_record(r.p.ctrl[1]).empty());
}

// Records a sending link must refuse, and the error that names them.
struct BadCase {
  const char* name;
  std::vector<std::vector<char>> records;
  const char* expect;
};

// A fresh sending link reading bc's records fails with ncclRemoteError, its text naming it.
void expect_sender_fails(const BadCase& bc) {
  SCOPED_TRACE(bc.name);
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(4096), 0);
  for (const auto& rec : bc.records) write_all(p.ctrl[1], rec);
  ncclResult_t e = ncclSuccess;
  ClearToSend cts;
  bool got = false;
  for (const auto end = Clock::now() + std::chrono::seconds(2); e == ncclSuccess && Clock::now() < end;)
    e = link.poll_cts(&cts, &got);
  EXPECT_EQ(e, ncclRemoteError);
  EXPECT_NE(link.error_text().find(bc.expect), std::string::npos) << link.error_text();
}

// A bounded push (a quiet gate's receives between probes): the grant goes with each receive that
// moves it on, under the same first placement; a receive that lifts the bound says so; one that
// wants a bound after an unbounded push cannot tighten it, and sends its clear-to-send instead.
TEST(Push, BoundedGrantsMoveOnAndNeverTighten) {
  Receiver r;
  std::vector<char> t[7];
  for (auto& b : t) b.assign(4096, 0);
  auto push_record = [&](uint32_t first, uint32_t until, uint32_t flags) {
    std::vector<char> rec = next_record(r.p.ctrl[1]);
    ASSERT_EQ(rec.size(), sizeof(PushRecord));
    PushRecord push;
    std::memcpy(&push, rec.data(), sizeof push);
    EXPECT_EQ(push.type, uint32_t(kPush));
    EXPECT_EQ(push.first, first);
    EXPECT_EQ(push.until, until);
    EXPECT_EQ(push.flags, flags);
  };
  ASSERT_EQ(r.post(&t[0], 0, false, true, 2), ncclSuccess);
  push_record(0, 3, kPushBounded);  // placement 0, and 2 past it
  ASSERT_EQ(r.post(&t[1], 0, false, true, 1), ncclSuccess);
  EXPECT_TRUE(next_record(r.p.ctrl[1]).empty()) << "1 past placement 1: within the grant";
  ASSERT_EQ(r.post(&t[2], 0, false, true, 4), ncclSuccess);
  push_record(0, 7, kPushBounded);
  ASSERT_EQ(r.post(&t[3], 0), ncclSuccess);
  push_record(0, 0, 0);  // lifted
  ASSERT_EQ(r.post(&t[4], 0, false, true, 8), ncclSuccess);
  std::vector<char> rec = next_record(r.p.ctrl[1]);
  ASSERT_EQ(rec.size(), sizeof(CtsRecord)) << "no bound after an unbounded push";
  CtsRecord cts;
  std::memcpy(&cts, rec.data(), sizeof cts);
  EXPECT_EQ(cts.first, 4u);
  EXPECT_EQ(cts.e[0].flags, 0u);
  ASSERT_EQ(r.post(&t[5], 0, false, true, 0), ncclSuccess);
  push_record(5, 6, kPushBounded);  // a new push, bounded from the start
  ASSERT_EQ(r.post(&t[6], 0, false, true, 0), ncclSuccess);
  push_record(5, 7, kPushBounded);
  EXPECT_TRUE(next_record(r.p.ctrl[1]).empty());
}

// The sending end takes a bounded push and the records that move it on (poll_cts: n = 0 with the
// bound), and fails records a receiver never sends: one that tightens a bound or bounds an
// unbounded push, one of another first placement, unknown flags, a bound's field without its flag.
TEST(Push, SenderTakesBoundedPushAndItsMovesOn) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(4096), 0);
  const PushRecord bounded{kPush, 0, 3, kPushBounded}, moved{kPush, 0, 9, kPushBounded}, lifted{kPush, 0, 0, 0};
  ClearToSend cts;
  for (const PushRecord& rec : {bounded, moved, lifted}) {
    write_all(p.ctrl[1], record(&rec, sizeof rec));
    ASSERT_TRUE(next_cts(link, &cts));
    EXPECT_EQ(cts.n, 0u);
    EXPECT_EQ(cts.first, 0u);
    EXPECT_EQ(cts.push_bounded, rec.flags == kPushBounded);
    if (cts.push_bounded) {
      EXPECT_EQ(cts.push_until, rec.until);
    }
  }
  const PushRecord tighter{kPush, 0, 2, kPushBounded}, other{kPush, 1, 9, kPushBounded},
      unknown{kPush, 0, 3, kPushBounded | 2}, unbounded_until{kPush, 0, 3, 0};
  const BadCase cases[] = {
      {"Tightened", {record(&bounded, sizeof bounded), record(&tighter, sizeof tighter)}, "unexpected push record"},
      {"BoundAfterUnbounded", {record(&lifted, sizeof lifted), record(&bounded, sizeof bounded)}, "unexpected push record"},
      {"OtherFirst", {record(&bounded, sizeof bounded), record(&other, sizeof other)}, "unexpected push record (placement 1, 0"},
      {"UnknownFlags", {record(&unknown, sizeof unknown)}, "unexpected push record"},
      {"UnboundedWithAnUntil", {record(&unbounded_until, sizeof unbounded_until)}, "unexpected push record"},
  };
  for (const BadCase& bc : cases) expect_sender_fails(bc);
}

// A receive that offers nothing but must be seen (a quiet gate's probe that found its kernel
// stopped) is no push: its sender waits for its clear-to-send, and follows the receives again.
TEST(Push, NotForReceivesThatMayOfferLater) {
  Receiver r;
  std::vector<char> t(4096, 0);
  ASSERT_EQ(r.post(&t, 0, false, false), ncclSuccess);
  std::vector<char> rec = next_record(r.p.ctrl[1]);
  ASSERT_EQ(rec.size(), sizeof(CtsRecord));
  CtsRecord cts;
  std::memcpy(&cts, rec.data(), sizeof cts);
  EXPECT_EQ(cts.e[0].flags, 0u);
}

// Pushed messages land by index and tag, inline or with their bytes on the data sockets, in the
// order of their headers, also in a receive that offered staging (sent before its offer came).
TEST(Push, MessagesOfAnySizeLandInOrder) {
  Receiver r;
  std::vector<char> t0(100000, 0), t1(1000, 0), t2(200000, 0);
  ASSERT_EQ(r.post(&t0, 1), ncclSuccess);
  const std::vector<char> m0 = pattern(100000, 1), m1 = pattern(1000, 2), m2 = pattern(150000, 3);
  write_all(r.p.ctrl[1], eager(0, 1, m0.size(), false, m0));
  write_all(r.p.ctrl[1], eager(1, 2, m1.size(), true, m1));
  write_all(r.p.ctrl[1], eager(2, 3, m2.size(), false, m2));
  std::thread data([&] {
    write_all(r.p.data[1], m0);
    write_all(r.p.data[1], m2);
  });
  std::vector<MessageHeader> got = r.arrivals(1);
  ASSERT_EQ(got.size(), 1u) << r.link.error_text();
  EXPECT_EQ(t0, m0);
  ASSERT_EQ(r.post(&t1, 2), ncclSuccess);
  ASSERT_EQ(r.post(&t2, 3, true), ncclSuccess);
  got = r.arrivals(2);
  data.join();
  ASSERT_EQ(got.size(), 2u) << r.link.error_text();
  EXPECT_EQ(got[0].seq, 1u);
  EXPECT_EQ(got[1].seq, 2u);
  EXPECT_FALSE(got[1].compressed);
  EXPECT_EQ(t1, m1);
  EXPECT_TRUE(std::equal(m2.begin(), m2.end(), t2.begin()));
  EXPECT_EQ(std::count(t2.begin() + long(m2.size()), t2.end(), 0), long(t2.size() - m2.size()));
}

// A sender that pushed its last message and closed: the receives posted after it still get what
// it sent (the records they would send have no reader, which is no error).
TEST(Push, ASenderGoneAfterItsLastMessageIsNoError) {
  Receiver r;
  std::vector<char> t0(1000, 0), t1(1000, 0);
  ASSERT_EQ(r.post(&t0, 0), ncclSuccess);
  const std::vector<char> m0 = pattern(1000, 4), m1 = pattern(1000, 5);
  write_all(r.p.ctrl[1], eager(0, 0, m0.size(), true, m0));
  write_all(r.p.ctrl[1], eager(1, 0, m1.size(), true, m1));
  close(r.p.ctrl[1]);  // with the push record unread
  r.p.ctrl[1] = open("/dev/null", O_RDONLY);
  ASSERT_EQ(r.arrivals(1).size(), 1u) << r.link.error_text();
  ASSERT_EQ(r.post(&t1, 0, true), ncclSuccess) << r.link.error_text();  // its clear-to-send goes nowhere
  ASSERT_EQ(r.arrivals(1).size(), 1u) << r.link.error_text();
  EXPECT_EQ(t0, m0);
  EXPECT_EQ(t1, m1);
}

// The sending end: a push record is poll_cts()'s n = 0 with its first placement; then eager
// messages of any size go (bytes past the inline limit on the data sockets); a clear-to-send after
// it may skip the receives that had none, never go back.
TEST(Push, SenderTakesPushAndSendsAnySize) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(4096), 0);
  const PushRecord push{kPush, 0, 0, 0};
  write_all(p.ctrl[1], record(&push, sizeof push));
  ClearToSend cts;
  ASSERT_TRUE(next_cts(link, &cts));
  EXPECT_EQ(cts.n, 0u);
  EXPECT_EQ(cts.first, 0u);
  const std::vector<char> big = pattern(100000, 6);
  Xfer x;
  std::thread drain([&] { EXPECT_EQ(read_exactly(p.data[1], big.size()), big); });
  ASSERT_EQ(link.post_eager(0, 3, big.data(), big.size(), RawWhy::kDeclined, true, &x), ncclSuccess) << link.error_text();
  while (!x.done()) ASSERT_EQ(link.progress(), ncclSuccess) << link.error_text();
  drain.join();
  std::vector<char> rec = next_record(p.ctrl[1]);
  ASSERT_EQ(rec.size(), sizeof(HeaderRecord));
  HeaderRecord h;
  std::memcpy(&h, rec.data(), sizeof h);
  EXPECT_EQ(h.flags, uint32_t(kEager | kPushed | uint32_t(RawWhy::kDeclined) << kRawWhyShift));
  EXPECT_EQ(h.seq, 0u);
  EXPECT_EQ(int32_t(h.sub), 3);
  EXPECT_EQ(h.wire_bytes, big.size());

  CtsRecord c{};
  c.type = kCts;
  c.seq = 5;
  c.n = 2;
  c.first = 6;
  write_all(p.ctrl[1], record(&c, sizeof c));
  ASSERT_TRUE(next_cts(link, &cts));
  EXPECT_EQ(cts.seq, 5u);
  EXPECT_EQ(cts.first, 6u);
  EXPECT_EQ(cts.n, 2u);
}

TEST(Push, RecordsOutOfTurnFailTheSender) {
  const PushRecord push0{kPush, 0, 0, 0}, push5{kPush, 5, 0, 0};
  CtsRecord c0{};
  c0.type = kCts;
  c0.n = 1;
  CtsRecord ahead = c0;
  ahead.first = 2;  // without a push, placements come in turn
  CtsRecord back_seq = c0;
  back_seq.seq = 0;
  back_seq.first = 0;
  const BadCase cases[] = {
      {"PushTwice", {record(&push0, sizeof push0), record(&push0, sizeof push0)}, "unexpected push record"},
      {"PushNotWhereTheLastRecordEnded", {record(&push5, sizeof push5)}, "unexpected push record (placement 5, 0"},
      {"PlacementsSkippedWithoutAPush", {record(&ahead, sizeof ahead)}, "unexpected clear-to-send"},
      {"ClearToSendBehindTheLast", {record(&c0, sizeof c0), record(&back_seq, sizeof back_seq)},
       "unexpected clear-to-send"},
  };
  for (const BadCase& bc : cases) expect_sender_fails(bc);
}

// A link that does not let its senders push (NCCL_ZIP_SOCKET_PUSH=0) sends a clear-to-send for
// every receive, and refuses what only a push allows: a message sent ahead outside its header.
TEST(Push, NoneWherePushIsOff) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(kMaxInline), 8, false);
  std::vector<char> t(100000, 0);
  ASSERT_EQ(post_receive(link, &t), ncclSuccess);
  EXPECT_EQ(next_record(p.ctrl[1]).size(), sizeof(CtsRecord));
  const std::vector<char> m = pattern(100000, 7);
  write_all(p.ctrl[1], eager(0, 0, m.size(), false, m));
  for (const auto end = Clock::now() + std::chrono::seconds(2); link.error() == ncclSuccess && Clock::now() < end;)
    link.progress();
  EXPECT_NE(link.error_text().find("is not raw inside its header"), std::string::npos) << link.error_text();
  EXPECT_EQ(t, std::vector<char>(100000, 0));
}

}  // namespace
}  // namespace zipccl::tcp
