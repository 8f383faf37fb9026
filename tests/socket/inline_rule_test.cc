// InlineRule (socket/inline_rule.h): which messages go inside their header record, by size and by
// whether another large message left the process just before.
#include "inline_rule.h"

#include <gtest/gtest.h>

#include "socket_wire.h"

namespace zipccl::tcp {
namespace {

constexpr int64_t kWindow = InlineRule::kLoneWindowNs;
constexpr int64_t kT0 = int64_t(1) << 40;  // a steady clock well past its epoch

TEST(InlineRule, SmallMessagesAlwaysInlineAndLeaveNoMark) {
  std::atomic<int64_t> last{kT0};
  const InlineRule rule(16 << 10, 64 << 10, &last);
  EXPECT_TRUE(rule.take(1, kT0));
  EXPECT_TRUE(rule.take(16 << 10, kT0 + 1));
  EXPECT_EQ(last.load(), kT0);
}

TEST(InlineRule, TheClockOfTheCallMarksTheTime) {
  std::atomic<int64_t> last{0};
  const InlineRule rule(16 << 10, 64 << 10, &last);
  EXPECT_TRUE(rule.take(16 << 10));
  EXPECT_EQ(last.load(), 0);
  const int64_t before = now_ns();
  EXPECT_TRUE(rule.take(32 << 10));
  EXPECT_GE(last.load(), before);
}

TEST(InlineRule, LoneMessageInlineOnlyOutsideTheWindowOfTheLastLargeOne) {
  std::atomic<int64_t> last{0};
  const InlineRule rule(16 << 10, 64 << 10, &last);
  EXPECT_TRUE(rule.take(64 << 10, kT0));                       // nothing before it
  EXPECT_FALSE(rule.take((16 << 10) + 1, kT0 + kWindow - 1));  // a burst: helpers
  EXPECT_FALSE(rule.take(32 << 10, kT0 + 2 * kWindow - 2));    // the window counts from the last one
  EXPECT_TRUE(rule.take(32 << 10, kT0 + 3 * kWindow - 2));
  EXPECT_EQ(last.load(), kT0 + 3 * kWindow - 2);
}

TEST(InlineRule, MessagesPastTheLoneLimitNeverInlineButMarkTheTime) {
  std::atomic<int64_t> last{0};
  const InlineRule rule(16 << 10, 64 << 10, &last);
  EXPECT_FALSE(rule.take((64 << 10) + 1, kT0));
  EXPECT_EQ(last.load(), kT0);
  EXPECT_FALSE(rule.take(32 << 10, kT0 + 1000));  // beside a large message: not lone
  EXPECT_TRUE(rule.take(32 << 10, kT0 + 1000 + kWindow));
}

TEST(InlineRule, WithoutASharedMarkOrWithLoneZeroOnlyTheFixedLimit) {
  const InlineRule none(4096);
  EXPECT_TRUE(none.take(4096, kT0));
  EXPECT_FALSE(none.take(4097, kT0));
  std::atomic<int64_t> last{0};
  const InlineRule zero(4096, 0, &last), below(4096, 4096, &last);
  EXPECT_FALSE(zero.take(4097, kT0));
  EXPECT_FALSE(below.take(4097));
  EXPECT_EQ(last.load(), 0);  // no lone band: the shared mark is never written
}

TEST(InlineRule, LimitsAreClippedToTheLargestInlineRecord) {
  std::atomic<int64_t> last{0};
  const InlineRule rule(kMaxInline * 2, kMaxInline * 4, &last);
  EXPECT_EQ(rule.always(), kMaxInline);
  EXPECT_TRUE(rule.take(kMaxInline, kT0));
  EXPECT_FALSE(rule.take(kMaxInline + 1, kT0 + 10 * kWindow));
}

}  // namespace
}  // namespace zipccl::tcp
