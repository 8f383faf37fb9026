// A live peer that stops in the middle of a control record or of a message's bytes fails the link
// after its stall time (NCCL_ZIP_SOCKET_TIMEOUT_MS) with a remote error that says so; it waited
// forever. Links over socket pairs, the peer played by the test writing raw bytes.
#include <chrono>
#include <cstring>
#include <vector>

#include "raw_peer.h"

namespace zipccl::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// Calls f until it returns an error or 3 s pass; the error, and how long it took.
template <class F>
ncclResult_t until_error(F f, double* seconds) {
  const auto t0 = Clock::now();
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && Clock::now() - t0 < std::chrono::seconds(3)) {
    r = f();
    usleep(1000);
  }
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

TEST(Stall, PeerStoppingInAControlRecordFailsTheLink) {
  Pair p;
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 300, InlineRule(kMaxInline), 0);
  const uint32_t len = sizeof(CtsRecord);
  char part[4 + 16] = {};
  std::memcpy(part, &len, 4);
  ASSERT_EQ(write(p.ctrl[1], part, sizeof part), ssize_t(sizeof part));  // 16 of its bytes, then silence
  double s = 0;
  ClearToSend cts;
  bool got = false;
  EXPECT_EQ(until_error([&] { return link.poll_cts(&cts, &got); }, &s), ncclRemoteError);
  EXPECT_GE(s, 0.25);
  EXPECT_NE(link.error_text().find("stopped in the middle of a control record (16 of"), std::string::npos)
      << link.error_text();
}

TEST(Stall, PeerStoppingInAMessageFailsTheLink) {
  Pair p;
  std::vector<char> target(4096);  // outlives the link, whose thread may still be writing into it
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 300, InlineRule(kMaxInline), 0);
  ASSERT_EQ(post_receive(link, &target), ncclSuccess);
  const std::vector<char> rec = header_record({kHeader, 0, 0, 0, 4096, 4096}, {}, sizeof(HeaderRecord));
  ASSERT_EQ(write(p.ctrl[1], rec.data(), rec.size()), ssize_t(rec.size()));
  std::vector<char> some(1000, 7);
  ASSERT_EQ(write(p.data[1], some.data(), some.size()), ssize_t(some.size()));  // 1000 of 4096 bytes
  double s = 0;
  EXPECT_EQ(until_error([&] { return link.progress(); }, &s), ncclRemoteError);
  EXPECT_GE(s, 0.25);
  EXPECT_NE(link.error_text().find("stopped in the middle of 1 message(s)"), std::string::npos) << link.error_text();
}

// The same inside an inline message's bytes past what one read of the control socket brings,
// which go straight into the target.
TEST(Stall, PeerStoppingInAnInlineMessageFailsTheLink) {
  Pair p;
  std::vector<char> target(kMaxInline);
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 300, InlineRule(kMaxInline), 0);
  ASSERT_EQ(post_receive(link, &target), ncclSuccess);
  const std::vector<char> rec = header_record({kHeader, 0, 0, kInline, kMaxInline, kMaxInline}, pattern(40000, 3),
                                              uint32_t(sizeof(HeaderRecord) + kMaxInline));
  ASSERT_EQ(write(p.ctrl[1], rec.data(), rec.size()), ssize_t(rec.size()));  // 40000 of its bytes
  double s = 0;
  EXPECT_EQ(until_error([&] { return link.progress(); }, &s), ncclRemoteError);
  EXPECT_GE(s, 0.25);
  EXPECT_NE(link.error_text().find("stopped in the middle of 1 message(s)"), std::string::npos) << link.error_text();
}

TEST(Stall, AQuietPeerBetweenMessagesIsNotAnError) {
  Pair p;
  std::vector<char> target(64);
  SocketLink link({p.ctrl[0], p.data[0]}, "test-peer", nullptr, 200, InlineRule(kMaxInline), 0);
  ASSERT_EQ(post_receive(link, &target), ncclSuccess);  // a receive posted, its sender busy elsewhere
  const auto end = Clock::now() + std::chrono::milliseconds(600);
  while (Clock::now() < end) {
    ASSERT_EQ(link.progress(), ncclSuccess);
    usleep(1000);
  }
}

}  // namespace
}  // namespace zipccl::tcp
