// PartMatcher: a message's parts over several QPs, in any order across QPs, back together in
// message order; a hostile peer's parts (disagreeing, for no receive, on no QP) are protocol
// errors and never pile up.
#include "ib_parts.h"

#include <gtest/gtest.h>

namespace zipccl::verbs {
namespace {

MessageHeader msg(uint32_t seq) {
  MessageHeader h;
  h.seq = seq;
  h.wire_bytes = 1000 + seq;
  return h;
}

// Parts on QP 2 before their message's first, QP 1's last: whole messages in message order.
TEST(PartMatcher, InterleavedQpsReassembleExactly) {
  PartMatcher m;
  MessageHeader h;
  ASSERT_EQ(m.first(msg(0), 0xA, 3), nullptr);
  ASSERT_EQ(m.part(2, 0xA, 1), nullptr);
  ASSERT_EQ(m.part(2, 0xB, 1), nullptr) << "message 1's part 2, before message 1";
  ASSERT_EQ(m.first(msg(1), 0xB, 3), nullptr);
  ASSERT_EQ(m.part(1, 0xA, 0), nullptr);
  ASSERT_TRUE(m.pop(&h));
  EXPECT_EQ(h.seq, 0u);
  EXPECT_FALSE(m.pop(&h));
  ASSERT_EQ(m.part(1, 0xB, 0), nullptr);
  ASSERT_TRUE(m.pop(&h));
  EXPECT_EQ(h.seq, 1u);
  EXPECT_TRUE(m.idle());
  ASSERT_EQ(m.first(msg(2), 0xC, 1), nullptr) << "a one-part message is whole at once";
  ASSERT_TRUE(m.pop(&h));
  EXPECT_EQ(h.seq, 2u);
}

TEST(PartMatcher, DisagreeingPartsAreAProtocolError) {
  PartMatcher m;
  ASSERT_EQ(m.first(msg(0), 0xA, 2), nullptr);
  EXPECT_NE(m.part(1, 0xF, 4), nullptr);
  PartMatcher early;
  ASSERT_EQ(early.part(1, 0xF, 4), nullptr);
  EXPECT_NE(early.first(msg(0), 0xA, 2), nullptr) << "the early part was not the message's";
}

// A peer sending parts on QP 1 with no first parts: an error once they outnumber the messages
// that can still come, and the matcher holds no more than that.
TEST(PartMatcher, PartsForNoReceiveAreBounded) {
  PartMatcher m;
  for (int i = 0; i < 8; ++i) ASSERT_EQ(m.part(1, 0xA, 8), nullptr) << i;
  EXPECT_NE(m.part(1, 0xA, 8), nullptr) << "a ninth part for 8 receives";
  PartMatcher none;
  EXPECT_NE(none.part(3, 0xA, 0), nullptr) << "no receive posted at all";
}

TEST(PartMatcher, QpsAndPartCountsOutOfRangeAreErrors) {
  PartMatcher m;
  EXPECT_NE(m.part(0, 0xA, 8), nullptr) << "QP 0 carries first parts";
  EXPECT_NE(m.part(uint32_t(kMaxQpsPerConn), 0xA, 8), nullptr);
  EXPECT_NE(m.first(msg(0), 0xA, 0), nullptr);
  EXPECT_NE(m.first(msg(0), 0xA, uint32_t(kMaxQpsPerConn) + 1), nullptr);
}

}  // namespace
}  // namespace zipccl::verbs
