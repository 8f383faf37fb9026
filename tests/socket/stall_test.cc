// A live peer that stops in the middle of a control record or of a message's bytes fails the link
// after its stall time (NCCL_ZIP_SOCKET_TIMEOUT_MS) with a remote error that says so; it waited
// forever. One that closes there (its process died) fails it at once. Links over socket pairs, the
// peer played by the test writing raw bytes.
#include <chrono>
#include <cstring>
#include <string>
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

// How the peer leaves a record or a message unfinished: it stays silent (an error after the stall
// time), or its process dies and its sockets close (an error at once, not after the stall time).
enum class Cut { kSilent, kClosed };

class Unfinished : public ::testing::TestWithParam<Cut> {
 protected:
  bool closed() const { return GetParam() == Cut::kClosed; }
  int64_t stall_ms() const { return closed() ? 20000 : 300; }
  // The peer, its bytes written, stays silent or closes its ends.
  void leave() {
    if (closed()) p_.close_peer();
  }
  // f fails the link with a remote error: after the stall time saying `stopped`, or at once
  // saying `closed`.
  template <class F>
  void expect_failure(F f, const SocketLink& link, const std::string& stopped, const std::string& closed_text) {
    double s = 0;
    EXPECT_EQ(until_error(f, &s), ncclRemoteError);
    if (closed())
      EXPECT_LT(s, 1.0);
    else
      EXPECT_GE(s, 0.25);
    const std::string& want = closed() ? closed_text : stopped;
    EXPECT_NE(link.error_text().find(want), std::string::npos) << link.error_text();
  }
  Pair p_;
};

TEST_P(Unfinished, ControlRecordFailsTheLink) {
  SocketLink link({p_.ctrl[0], p_.data[0]}, "test-peer", nullptr, stall_ms(), InlineRule(kMaxInline), 0);
  const uint32_t len = sizeof(CtsRecord);
  char part[4 + 16] = {};
  std::memcpy(part, &len, 4);
  ASSERT_EQ(write(p_.ctrl[1], part, sizeof part), ssize_t(sizeof part));  // 16 of its bytes
  leave();
  ClearToSend cts;
  bool got = false;
  expect_failure([&] { return link.poll_cts(&cts, &got); }, link, "stopped in the middle of a control record (16 of",
                 "closed the connection in the middle of a control record (16 of");
}

TEST_P(Unfinished, MessageFailsTheLink) {
  std::vector<char> target(4096);  // outlives the link, whose thread may still be writing into it
  SocketLink link({p_.ctrl[0], p_.data[0]}, "test-peer", nullptr, stall_ms(), InlineRule(kMaxInline), 0);
  ASSERT_EQ(post_receive(link, &target), ncclSuccess);
  const std::vector<char> rec = header_record({kHeader, 0, 0, 0, 4096, 4096}, {}, sizeof(HeaderRecord));
  ASSERT_EQ(write(p_.ctrl[1], rec.data(), rec.size()), ssize_t(rec.size()));
  std::vector<char> some(1000, 7);
  ASSERT_EQ(write(p_.data[1], some.data(), some.size()), ssize_t(some.size()));  // 1000 of 4096 bytes
  leave();
  expect_failure([&] { return link.progress(); }, link, "stopped in the middle of 1 message(s)",
                 "receive from test-peer: peer closed the connection");
}

// The same inside an inline message's bytes past what one read of the control socket brings,
// which go straight into the target.
TEST_P(Unfinished, InlineMessageFailsTheLink) {
  std::vector<char> target(kMaxInline);
  SocketLink link({p_.ctrl[0], p_.data[0]}, "test-peer", nullptr, stall_ms(), InlineRule(kMaxInline), 0);
  ASSERT_EQ(post_receive(link, &target), ncclSuccess);
  const std::vector<char> rec = header_record({kHeader, 0, 0, kInline, kMaxInline, kMaxInline}, pattern(40000, 3),
                                              uint32_t(sizeof(HeaderRecord) + kMaxInline));
  ASSERT_EQ(write(p_.ctrl[1], rec.data(), rec.size()), ssize_t(rec.size()));  // 40000 of its bytes
  leave();
  expect_failure([&] { return link.progress(); }, link, "stopped in the middle of 1 message(s)",
                 "closed the connection in the middle of an inline message (" + std::to_string(kMaxInline - 40000) +
                     " of its bytes missing)");
}

INSTANTIATE_TEST_SUITE_P(Stall, Unfinished, ::testing::Values(Cut::kSilent, Cut::kClosed),
                         [](const auto& i) { return i.param == Cut::kSilent ? "PeerSilent" : "PeerClosed"; });

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
