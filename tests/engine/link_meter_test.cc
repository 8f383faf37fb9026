// LinkMeter: a device's link rate from the spans its messages spent on the link, whenever and in
// whatever order NCCL gets round to testing them.
#include "link_meter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace zipccl {
namespace {

constexpr int64_t kMs = 1000000;
constexpr uint64_t kMB = 1000000;
constexpr int64_t kLate = 1000 * kMs;  // when the spans below are tested

// Counts every span added so far.
void settle(LinkMeter* m) { m->add(kLate, kLate, 0, kLate + LinkMeter::kSettleNs); }

// Forty 1 MB messages back to back at 1 GB/s, all seen done by one test at the end: the link's
// rate, not 40 MB in the microseconds between the tests.
TEST(LinkMeter, ReadsTheLinkNotTheTester) {
  LinkMeter m;
  for (int i = 0; i < 40; ++i) m.add(i * kMs, (i + 1) * kMs, kMB, 40 * kMs);
  EXPECT_EQ(m.bytes_per_s(), 0) << "nothing has settled yet";
  settle(&m);
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 1e9);
}

// Two comms sharing the NIC, each 1 MB in the same 2 ms every 10 ms; one comm's sends are tested
// as they end, the other's 30 ms late, after the first comm's next ones: 1 GB/s, the overlap
// counted once and the idle time not at all.
TEST(LinkMeter, OverlappingSpansCountOnceInAnyOrder) {
  LinkMeter m;
  std::vector<std::pair<int64_t, int64_t>> tests;  // (tested at, span start)
  for (int i = 0; i < 20; ++i) {
    tests.emplace_back(i * 10 * kMs + 2 * kMs, i * 10 * kMs);
    tests.emplace_back(i * 10 * kMs + 30 * kMs, i * 10 * kMs);
  }
  std::sort(tests.begin(), tests.end());
  for (const auto& [at, t] : tests) m.add(t, t + 2 * kMs, kMB, at);
  settle(&m);
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 1e9);
}

// A span tested after it settled counts only the time beyond what was counted already.
TEST(LinkMeter, ASpanTestedTooLateAddsOnlyNewTime) {
  LinkMeter m;
  for (int i = 0; i < 40; ++i) m.add(i * kMs, (i + 1) * kMs, kMB, kLate);
  settle(&m);
  const double before = m.bytes_per_s();
  m.add(0, 40 * kMs, 0, 2 * kLate);  // inside counted time: no time, no bytes
  m.add(2 * kLate, 2 * kLate + 40 * kMs, 40 * kMB, 3 * kLate);
  EXPECT_DOUBLE_EQ(before, 1e9);
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 1e9);
}

// 40 MB at 1 GB/s, then 40 MB of small messages at 0.1 GB/s while busy: the rate of the moment
// falls, the link's peak stays.
TEST(LinkMeter, ThePeakOutlastsASlowPhase) {
  LinkMeter m;
  for (int i = 0; i < 40; ++i) m.add(i * kMs, (i + 1) * kMs, kMB, kLate);
  settle(&m);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1e9);
  for (int i = 0; i < 400; ++i) m.add(2 * kLate + i * kMs, 2 * kLate + i * kMs + kMs, kMB / 10, 3 * kLate);
  EXPECT_LT(m.bytes_per_s(), 0.5e9);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1e9);
}

// Short gaps between the spans (a link busy 80% of the time): its windows set the peak.
TEST(LinkMeter, AMostlyBusyLinkSetsThePeak) {
  LinkMeter m;
  for (int i = 0; i < 40; ++i) m.add(i * kMs, i * kMs + 800000, kMB, kLate);
  settle(&m);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1.25e9);
}

// A link of 1 GB/s with a buffer below the transport: after each idle gap a 1 MB message is taken
// in 0.1 ms (10 GB/s while busy, 0.5 GB/s over wall time). The rate of the moment reads the
// buffer; the peak, the link.
TEST(LinkMeter, BurstsAfterIdleGapsDoNotRaiseThePeak) {
  LinkMeter m;
  for (int i = 0; i < 200; ++i) m.add(i * 2 * kMs, i * 2 * kMs + kMs / 10, kMB, kLate);
  settle(&m);
  EXPECT_GT(m.bytes_per_s(), 5e9);
  EXPECT_EQ(m.peak_bytes_per_s(), 0) << "no window kept the link busy";
  for (int i = 0; i < 40; ++i) m.add(2 * kLate + i * kMs, 2 * kLate + (i + 1) * kMs, kMB, 3 * kLate);
  settle(&m);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1e9);
  for (int i = 0; i < 200; ++i) m.add(4 * kLate + i * 2 * kMs, 4 * kLate + i * 2 * kMs + kMs / 10, kMB, 5 * kLate);
  settle(&m);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1e9);
}

TEST(LinkMeter, OnePerDevice) {
  EXPECT_EQ(link_meter(3), link_meter(3));
  EXPECT_NE(link_meter(3), link_meter(4));
}

}  // namespace
}  // namespace zipccl
