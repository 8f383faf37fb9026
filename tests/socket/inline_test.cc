// Messages inside their header record (kInline): what a sending link puts on the control socket
// and what a receiving link takes from a peer that gets it wrong. Links over socket pairs, the peer
// played by the test reading and writing raw bytes.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "clock.h"
#include "pacer.h"
#include "raw_peer.h"

namespace zipccl::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// The receiving link with receive seq 0 posted (raw bytes into *target), the peer's record
// written; progress until an arrival or an error (2 s at most).
ncclResult_t receive(const std::vector<char>& rec, std::vector<char>* target, std::string* error,
                     MessageHeader* arrival = nullptr) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(kMaxInline), 0);
  EXPECT_EQ(post_receive(link, target), ncclSuccess);
  write_all(p.ctrl[1], rec);
  const auto end = Clock::now() + std::chrono::seconds(2);
  ncclResult_t r = ncclSuccess;
  while (Clock::now() < end) {
    MessageHeader h;
    bool got = false;
    if ((r = link.progress()) != ncclSuccess || (r = link.poll_arrival(&h, &got)) != ncclSuccess) break;
    if (got) {
      if (arrival) *arrival = h;
      break;
    }
  }
  *error = link.error_text();
  return r;
}

TEST(Inline, MessageLandsFromTheControlSocketAlone) {
  const std::vector<char> msg = pattern(1000, 1);
  std::vector<char> target(1000, 0);
  std::string error;
  MessageHeader a;
  a.wire_bytes = 0;
  ASSERT_EQ(receive(header_record({kHeader, 0, 0, kInline, 1000, 1000}, msg, 32 + 1000), &target, &error, &a),
            ncclSuccess)
      << error;
  EXPECT_EQ(a.wire_bytes, 1000u);
  EXPECT_EQ(target, msg);
}

TEST(Inline, PayloadShorterThanItsHeaderSaysFailsTheLink) {
  std::vector<char> target(1000);
  std::string error;
  EXPECT_EQ(receive(header_record({kHeader, 0, 0, kInline, 1000, 1000}, pattern(999, 2), 32 + 999), &target, &error),
            ncclRemoteError);
  EXPECT_NE(error.find("protocol error: data header (seq 0) for 1000 bytes inline in a record carrying 999"),
            std::string::npos)
      << error;
}

TEST(Inline, PayloadWithoutTheInlineFlagFailsTheLink) {
  std::vector<char> target(1000);
  std::string error;
  EXPECT_EQ(receive(header_record({kHeader, 0, 0, 0, 1000, 1000}, pattern(16, 3), 32 + 16), &target, &error),
            ncclRemoteError);
  EXPECT_NE(error.find("for 1000 bytes in a record carrying 16"), std::string::npos) << error;
}

TEST(Inline, RecordLargerThanTheLargestInlineMessageFailsTheLink) {
  std::vector<char> target(kMaxInline + 1);
  std::string error;
  const uint32_t len = uint32_t(kMaxRecord + 1);
  EXPECT_EQ(receive(header_record({kHeader, 0, 0, kInline, len - 32, len - 32}, {}, len), &target, &error),
            ncclRemoteError);
  EXPECT_NE(error.find("control record of " + std::to_string(len) + " bytes"), std::string::npos) << error;
}

TEST(Inline, MessageLargerThanItsReceiveFailsTheLink) {
  std::vector<char> target(100, 0);
  std::string error;
  EXPECT_EQ(receive(header_record({kHeader, 0, 0, kInline, 1000, 1000}, pattern(1000, 4), 32 + 1000), &target, &error),
            ncclRemoteError);
  EXPECT_NE(error.find("does not fit the receive"), std::string::npos) << error;
  EXPECT_EQ(target, std::vector<char>(100, 0));
}

// An inline message longer than one read of the control socket: its first bytes are copied from
// the record, the rest received straight into the target as they trickle in (the first piece ends
// inside a line's last 8 bytes), and the record after it is taken only once they are all in.
TEST(Inline, MessagePastTheReadAheadLandsAsItsBytesTrickleIn) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(kMaxInline), 0);
  std::vector<char> large_target(kMaxInline, 0), small_target(1000, 0);
  ClearToSend cts{};
  cts.n = 2;
  cts.p[0].capacity = large_target.size();
  cts.p[0].target = reinterpret_cast<uintptr_t>(large_target.data());
  cts.p[1].capacity = small_target.size();
  cts.p[1].target = reinterpret_cast<uintptr_t>(small_target.data());
  ASSERT_EQ(link.post_cts(cts), ncclSuccess);
  const std::vector<char> large = pattern(kMaxInline, 10), small = pattern(1000, 11);
  std::vector<char> bytes = header_record({kHeader, 0, 0, kInline, large.size(), large.size()}, large,
                                          uint32_t(sizeof(HeaderRecord) + large.size()));
  const std::vector<char> second = header_record({kHeader, 0, 1, kInline, small.size(), small.size()}, small,
                                                 uint32_t(sizeof(HeaderRecord) + small.size()));
  bytes.insert(bytes.end(), second.begin(), second.end());
  size_t off = 4 + sizeof(HeaderRecord) + 10 * 128 + 124;
  write_all(p.ctrl[1], std::vector<char>(bytes.begin(), bytes.begin() + long(off)));
  int arrivals = 0;
  auto poll = [&] {
    for (int i = 0; i < 20; ++i) {
      ASSERT_EQ(link.progress(), ncclSuccess) << link.error_text();
      MessageHeader h;
      bool got = false;
      ASSERT_EQ(link.poll_arrival(&h, &got), ncclSuccess);
      arrivals += got;
    }
  };
  poll();
  EXPECT_EQ(arrivals, 0);
  for (; off < bytes.size(); off += std::min<size_t>(9999, bytes.size() - off)) {
    write_all(p.ctrl[1], std::vector<char>(bytes.begin() + long(off),
                                           bytes.begin() + long(off + std::min<size_t>(9999, bytes.size() - off))));
    poll();
  }
  for (int i = 0; i < 100 && arrivals < 2; ++i) poll();
  EXPECT_EQ(arrivals, 2);
  EXPECT_EQ(large_target, large);
  EXPECT_EQ(small_target, small);
}

// Takes the peer's next clear-to-send and sends `msg` against it, to completion.
void send_one(SocketLink& link, const std::vector<char>& msg) {
  ClearToSend cts;
  bool got = false;
  while (!got) ASSERT_EQ(link.poll_cts(&cts, &got), ncclSuccess) << link.error_text();
  MessageHeader h;
  h.seq = cts.seq;
  h.wire_bytes = h.orig_bytes = msg.size();
  Xfer x;
  ASSERT_EQ(link.post_message(h, cts.p[0], msg.data(), &x), ncclSuccess);
  while (!x.done()) ASSERT_EQ(link.progress(), ncclSuccess) << link.error_text();
}

TEST(Inline, UpToTheLimitInsideTheHeaderAboveOnTheDataSockets) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(4096), 0);
  write_all(p.ctrl[1], cts_record(0, 8192));
  write_all(p.ctrl[1], cts_record(1, 8192));
  const std::vector<char> small = pattern(4096, 5), large = pattern(4097, 6);
  send_one(link, small);
  std::vector<char> rec = read_exactly(p.ctrl[1], 4 + sizeof(HeaderRecord) + small.size());
  ASSERT_EQ(rec.size(), 4 + sizeof(HeaderRecord) + small.size());
  uint32_t len = 0;
  HeaderRecord h;
  std::memcpy(&len, rec.data(), 4);
  std::memcpy(&h, rec.data() + 4, sizeof h);
  EXPECT_EQ(len, sizeof h + small.size());
  EXPECT_EQ(h.flags & kInline, uint32_t(kInline));
  EXPECT_EQ(h.wire_bytes, small.size());
  EXPECT_TRUE(std::equal(small.begin(), small.end(), rec.begin() + 4 + long(sizeof h)));

  std::thread drain([&] { EXPECT_EQ(read_exactly(p.data[1], large.size()), large); });
  send_one(link, large);
  drain.join();
  rec = read_exactly(p.ctrl[1], 4 + sizeof(HeaderRecord));
  ASSERT_EQ(rec.size(), 4 + sizeof(HeaderRecord));
  std::memcpy(&len, rec.data(), 4);
  std::memcpy(&h, rec.data() + 4, sizeof h);
  EXPECT_EQ(len, sizeof h);
  EXPECT_EQ(h.flags & kInline, 0u);
  EXPECT_EQ(h.wire_bytes, large.size());
}

// Inline messages go out from the caller's buffers, not copies: many posted at once, each its own
// buffer, through a small socket buffer and a peer reading odd pieces, so that sends stop in the
// middle of headers and of payloads; the peer reads every record whole and in order.
TEST(Inline, ManyAtOnceThroughPartialSendsArriveWhole) {
  Pair p;
  const int small_buffer = 4096;
  ASSERT_EQ(setsockopt(p.ctrl[0], SOL_SOCKET, SO_SNDBUF, &small_buffer, sizeof small_buffer), 0);
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(kMaxInline), 0);
  constexpr int kMsgs = 24;
  std::vector<std::vector<char>> msgs;
  size_t total = 0;
  for (int i = 0; i < kMsgs; ++i) {
    msgs.push_back(pattern(1 + size_t(i) * 2731 % kMaxInline, 20 + i));
    total += 4 + sizeof(HeaderRecord) + msgs.back().size();
    write_all(p.ctrl[1], cts_record(uint32_t(i), kMaxInline));
  }
  std::vector<char> stream;
  std::thread reader([&] {
    std::vector<char> piece(3001);
    while (stream.size() < total) {
      const ssize_t r = read(p.ctrl[1], piece.data(), std::min(piece.size(), total - stream.size()));
      if (r <= 0) break;
      stream.insert(stream.end(), piece.begin(), piece.begin() + r);
    }
  });
  std::vector<Xfer> xfers(kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    ClearToSend cts;
    bool got = false;
    while (!got) ASSERT_EQ(link.poll_cts(&cts, &got), ncclSuccess) << link.error_text();
    MessageHeader h;
    h.seq = cts.seq;
    h.wire_bytes = h.orig_bytes = msgs[size_t(i)].size();
    ASSERT_EQ(link.post_message(h, cts.p[0], msgs[size_t(i)].data(), &xfers[size_t(i)]), ncclSuccess);
  }
  for (int i = 0; i < kMsgs; ++i)
    while (!xfers[size_t(i)].done()) ASSERT_EQ(link.progress(), ncclSuccess) << link.error_text();
  reader.join();
  ASSERT_EQ(stream.size(), total);
  size_t off = 0;
  for (int i = 0; i < kMsgs; ++i) {
    const std::vector<char>& m = msgs[size_t(i)];
    uint32_t len = 0;
    HeaderRecord h;
    std::memcpy(&len, stream.data() + off, 4);
    std::memcpy(&h, stream.data() + off + 4, sizeof h);
    EXPECT_EQ(len, sizeof h + m.size()) << i;
    EXPECT_EQ(h.seq, uint32_t(i));
    EXPECT_EQ(h.flags & kInline, uint32_t(kInline)) << i;
    EXPECT_TRUE(std::equal(m.begin(), m.end(), stream.begin() + long(off + 4 + sizeof h))) << i;
    off += 4 + sizeof h + m.size();
  }
}

// A send queue that never empties (a paced link saturated by inline messages, each sent as one
// before it completes, as NCCL keeps 8 in flight) holds its sent records for a bounded while only,
// not every record since it last emptied.
TEST(Inline, AQueueThatNeverEmptiesHoldsABoundedBuffer) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", std::make_shared<Pacer>(500e6), 1000,
                  InlineRule(kMaxInline), 0);
  constexpr uint32_t kMsgs = 20000;
  const std::vector<char> msg = pattern(16 << 10, 40);
  const size_t total = kMsgs * (4 + sizeof(HeaderRecord) + msg.size());
  std::thread reader([&] {
    std::vector<char> piece(1 << 16);
    for (size_t got = 0; got < total;) {
      const ssize_t r = read(p.ctrl[1], piece.data(), std::min(piece.size(), total - got));
      if (r <= 0) break;
      got += size_t(r);
    }
  });
  std::deque<Xfer> inflight;
  size_t most = 0;
  for (uint32_t i = 0; i < kMsgs || !inflight.empty();) {
    if (i < kMsgs && inflight.size() < 8) {
      MessageHeader h;
      h.seq = i++;
      h.wire_bytes = h.orig_bytes = msg.size();
      ASSERT_EQ(link.post_message(h, Placement{}, msg.data(), &inflight.emplace_back()), ncclSuccess);
    }
    ASSERT_EQ(link.progress(), ncclSuccess) << link.error_text();
    while (!inflight.empty() && inflight.front().done()) inflight.pop_front();
    most = std::max(most, link.held_record_bytes());
  }
  reader.join();
  EXPECT_LT(most, size_t(65 << 10));
}

// Not copied: what the socket has not taken yet leaves from the caller's buffer, which the
// transfer holds until then (a change made before is what arrives).
TEST(Inline, BytesLeaveFromTheCallersBufferWhenTheSocketTakesThem) {
  Pair p;
  const int small_buffer = 4096;
  ASSERT_EQ(setsockopt(p.ctrl[0], SOL_SOCKET, SO_SNDBUF, &small_buffer, sizeof small_buffer), 0);
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(kMaxInline), 0);
  write_all(p.ctrl[1], cts_record(0, kMaxInline));
  std::vector<char> msg = pattern(kMaxInline, 30);
  ClearToSend cts;
  bool got = false;
  while (!got) ASSERT_EQ(link.poll_cts(&cts, &got), ncclSuccess) << link.error_text();
  MessageHeader h;
  h.wire_bytes = h.orig_bytes = msg.size();
  Xfer x;
  ASSERT_EQ(link.post_message(h, cts.p[0], msg.data(), &x), ncclSuccess);
  ASSERT_EQ(link.progress(), ncclSuccess);
  EXPECT_FALSE(x.done()) << "the socket took 64 KiB with nobody reading";
  std::fill(msg.end() - 1000, msg.end(), char(0x5A));
  std::vector<char> rec;
  std::thread reader([&] { rec = read_exactly(p.ctrl[1], 4 + sizeof(HeaderRecord) + msg.size()); });
  while (!x.done()) ASSERT_EQ(link.progress(), ncclSuccess) << link.error_text();
  reader.join();
  ASSERT_EQ(rec.size(), 4 + sizeof(HeaderRecord) + msg.size());
  EXPECT_TRUE(std::equal(msg.begin(), msg.end(), rec.begin() + long(4 + sizeof(HeaderRecord))));
}

// Past the fixed limit, a message goes inline when no other large message left the process just
// before (the shared mark far back), and over the data sockets when one did (the mark ahead).
TEST(Inline, LoneMessagePastTheLimitInsideTheHeaderOthersOnTheDataSockets) {
  Pair p;
  std::atomic<int64_t> last{0};
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 1000, InlineRule(4096, 64 << 10, &last), 0);
  write_all(p.ctrl[1], cts_record(0, 64 << 10));
  write_all(p.ctrl[1], cts_record(1, 64 << 10));
  const std::vector<char> lone = pattern(48 << 10, 8), crowded = pattern(48 << 10, 9);
  std::vector<char> rec;
  std::thread read_lone([&] { rec = read_exactly(p.ctrl[1], 4 + sizeof(HeaderRecord) + lone.size()); });
  send_one(link, lone);
  read_lone.join();
  ASSERT_EQ(rec.size(), 4 + sizeof(HeaderRecord) + lone.size());
  HeaderRecord h;
  std::memcpy(&h, rec.data() + 4, sizeof h);
  EXPECT_EQ(h.flags & kInline, uint32_t(kInline));
  EXPECT_TRUE(std::equal(lone.begin(), lone.end(), rec.begin() + 4 + long(sizeof h)));

  last = now_ns() + int64_t(60) * 1000000000;  // another large message "now" for the next minute
  std::thread drain([&] { EXPECT_EQ(read_exactly(p.data[1], crowded.size()), crowded); });
  send_one(link, crowded);
  drain.join();
  rec = read_exactly(p.ctrl[1], 4 + sizeof(HeaderRecord));
  ASSERT_EQ(rec.size(), 4 + sizeof(HeaderRecord));
  std::memcpy(&h, rec.data() + 4, sizeof h);
  EXPECT_EQ(h.flags & kInline, 0u);
  EXPECT_EQ(h.wire_bytes, crowded.size());
}

// The benchmarks' emulated NIC caps what goes inline too: 8 MiB in 128 inline messages through a
// 40 MB/s pacer take at least 0.2 s (less its burst).
TEST(Inline, InlineMessagesArePaced) {
  Pair p;
  auto pacer = std::make_shared<Pacer>(40e6);
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", pacer, 1000, InlineRule(kMaxInline), 0);
  constexpr int kMsgs = 128;
  const std::vector<char> msg = pattern(64 << 10, 7);
  for (uint32_t i = 0; i < kMsgs; ++i) write_all(p.ctrl[1], cts_record(i, msg.size()));
  size_t got = 0;
  std::thread drain([&] { got = read_exactly(p.ctrl[1], kMsgs * (4 + sizeof(HeaderRecord) + msg.size())).size(); });
  const auto t0 = Clock::now();
  for (int i = 0; i < kMsgs; ++i) send_one(link, msg);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  drain.join();
  EXPECT_EQ(got, kMsgs * (4 + sizeof(HeaderRecord) + msg.size()));
  EXPECT_GE(s, (double(kMsgs * msg.size()) - 65536) / 40e6 * 0.99);
}

}  // namespace
}  // namespace zipccl::tcp
