// LinkMeter: a device's link rate from the spans its messages spent on the link, whenever NCCL
// gets round to testing them.
#include "link_meter.h"

#include <gtest/gtest.h>

namespace zipccl {
namespace {

constexpr int64_t kMs = 1000000;
constexpr uint64_t kMB = 1000000;

// Eight 1 MB messages back to back at 1 GB/s, all seen done by one late test: the link's rate,
// not 8 MB in the microseconds between the tests.
TEST(LinkMeter, ReadsTheLinkNotTheTester) {
  LinkMeter m;
  for (int i = 0; i < 8; ++i) m.add(0, (i + 1) * kMs, kMB);
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 1e9);
}

// Two comms sharing the NIC, each 1.05 MB over the same 2.1 ms: 1 GB/s, the overlap counted once
// (two pairs fill one window).
TEST(LinkMeter, OverlappingSpansCountOnce) {
  LinkMeter m;
  m.add(0, kMs, kMB);  // the first value
  for (int i = 0; i < 4; ++i) {
    const int64_t t = 10 * kMs * (i + 1);
    m.add(t, t + 2100000, 1050000);
    m.add(t, t + 2100000, 1050000);
  }
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 1e9) << "idle time between the pairs does not count either";
}

// A span tested after a later one only adds what lies beyond the busy time counted already.
TEST(LinkMeter, ASpanInsideCountedTimeAddsNoTime) {
  LinkMeter m;
  m.add(0, 4 * kMs, 4 * kMB);
  m.add(kMs, 2 * kMs, 0);
  m.add(4 * kMs, 8 * kMs, 4 * kMB + 200000);
  EXPECT_NEAR(m.bytes_per_s(), 1e9 + 0.5 * 200000 / 4e-3, 1);
}

TEST(LinkMeter, OnePerDevice) {
  EXPECT_EQ(link_meter(3), link_meter(3));
  EXPECT_NE(link_meter(3), link_meter(4));
}

}  // namespace
}  // namespace zipccl
