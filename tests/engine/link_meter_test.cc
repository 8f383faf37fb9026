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

// Counts every span added so far that started before at.
void settle(LinkMeter* m, int64_t at = kLate) { m->add(at, at, 0, at + LinkMeter::kSettleNs); }

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

// A span tested after its time was counted adds nothing to it.
TEST(LinkMeter, ASpanTestedTooLateAddsOnlyNewTime) {
  LinkMeter m;
  for (int i = 0; i < 40; ++i) m.add(i * kMs, (i + 1) * kMs, kMB, (i + 1) * kMs);
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
  for (int i = 0; i < 40; ++i) m.add(i * kMs, (i + 1) * kMs, kMB, (i + 1) * kMs);
  settle(&m);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1e9);
  for (int i = 0; i < 400; ++i) m.add(2 * kLate + i * kMs, 2 * kLate + (i + 1) * kMs, kMB / 10, 2 * kLate + (i + 1) * kMs);
  settle(&m, 3 * kLate);
  EXPECT_LT(m.bytes_per_s(), 0.5e9);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1e9);
}

// Short gaps between the spans (a link busy 80% of the time): its windows set the peak.
TEST(LinkMeter, AMostlyBusyLinkSetsThePeak) {
  LinkMeter m;
  for (int i = 0; i < 40; ++i) m.add(i * kMs, i * kMs + 800000, kMB, i * kMs + 800000);
  settle(&m);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1.25e9);
}

// A link of 1 GB/s with a buffer below the transport: after each idle gap a 1 MB message is taken
// in 0.1 ms (10 GB/s while busy, 0.5 GB/s over wall time). The rate of the moment reads the
// buffer; the peak, the link.
TEST(LinkMeter, BurstsAfterIdleGapsDoNotRaiseThePeak) {
  LinkMeter m;
  for (int i = 0; i < 200; ++i) m.add(i * 2 * kMs, i * 2 * kMs + kMs / 10, kMB, i * 2 * kMs + kMs / 10);
  settle(&m);
  EXPECT_GT(m.bytes_per_s(), 5e9);
  EXPECT_EQ(m.peak_bytes_per_s(), 0) << "no window kept the link busy";
  for (int i = 0; i < 40; ++i) m.add(2 * kLate + i * kMs, 2 * kLate + (i + 1) * kMs, kMB, 2 * kLate + (i + 1) * kMs);
  settle(&m, 3 * kLate);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1e9);
  for (int i = 0; i < 200; ++i)
    m.add(4 * kLate + i * 2 * kMs, 4 * kLate + i * 2 * kMs + kMs / 10, kMB, 4 * kLate + i * 2 * kMs + kMs / 10);
  settle(&m, 5 * kLate);
  EXPECT_DOUBLE_EQ(m.peak_bytes_per_s(), 1e9);
}

// 64 messages of 4 MiB through zipccl-net-bench's sender on a link paced to 1 GB/s, as it
// recorded them (start, end, us; each tested as it ended): up to 30 at once, and the last ones
// end within 55 ms of each other after 80 ms on the link. It moved 0.45 GB/s on average and never
// over its 1 GB/s; crediting each span's bytes where it started and its time where it ended read
// 4 GB/s at the end.
TEST(LinkMeter, OverlappingSpansCountTheirBytesWhereTheyMoved) {
  static const int64_t kSpans[][2] = {
    {0, 20765}, {5312, 34029}, {20765, 45485}, {24057, 60378}, {38907, 74628}, {58585, 89202},
    {74629, 107669}, {89202, 118195}, {107670, 134899}, {110980, 149246}, {134900, 168314},
    {149246, 171561}, {166745, 186935}, {171563, 202448}, {186936, 221218}, {199877, 238238},
    {214872, 251218}, {236615, 281617}, {251219, 296740}, {274649, 304535}, {294172, 326711},
    {304536, 343758}, {307655, 347349}, {331765, 361584}, {335000, 385202}, {355762, 396520},
    {370897, 401665}, {381860, 418630}, {401666, 434456}, {413029, 446968}, {430826, 457392},
    {442695, 464312}, {449390, 482656}, {454873, 501872}, {462641, 519765}, {463736, 541731},
    {466187, 543316}, {468939, 544906}, {471273, 548034}, {473741, 549972}, {475821, 552843},
    {477940, 555860}, {480214, 558703}, {482236, 561014}, {484659, 563563}, {487217, 565889},
    {489174, 568308}, {491242, 571179}, {493195, 574651}, {495881, 577229}, {497960, 578612},
    {500072, 580996}, {503037, 582673}, {505288, 584851}, {507586, 586685}, {509900, 587694},
    {512019, 588729}, {515231, 589767}, {517016, 590810}, {519287, 591859}, {522181, 592907},
    {524855, 593989}, {527643, 595008}, {529458, 596068}};
  LinkMeter m;
  uint64_t bytes = 0;
  for (const auto& s : kSpans) {
    m.add(s[0] * 1000, s[1] * 1000, 4 << 20, s[1] * 1000);
    bytes += 4 << 20;
  }
  settle(&m);
  const double rate = double(bytes) * 1e9 / (596071 * 1000.0);  // the spans leave no gap
  EXPECT_GT(m.peak_bytes_per_s(), 0.9 * rate);
  EXPECT_LE(m.peak_bytes_per_s(), 1e9);
}

TEST(LinkMeter, OnePerDevice) {
  EXPECT_EQ(link_meter(3), link_meter(3));
  EXPECT_NE(link_meter(3), link_meter(4));
}

}  // namespace
}  // namespace zipccl
