// BusyRate: a server's sustained rate while busy (the codec engines').
#include "busy_rate.h"

#include <gtest/gtest.h>

namespace zipccl {
namespace {

constexpr int64_t kMs = 1000000;
constexpr uint64_t kMB = 1000000;

TEST(BusyRate, QueuedJobsCountTheirTimeOnce) {
  BusyRate r;
  for (int i = 0; i < 4; ++i) r.started(0);
  r.finished(10 * kMs, kMB);  // the first job gives the first value
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 100e6);
  // Three more, finishing 10 ms apart: each waited behind the others (latency 20-40 ms), but
  // the server moved 1 MB every 10 ms.
  for (int i = 2; i <= 4; ++i) r.finished(i * 10 * kMs, kMB);
  EXPECT_EQ(r.outstanding(), 0);
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 100e6) << "3 MB is not yet a window: the first value stands";
  r.started(40 * kMs);
  r.finished(50 * kMs, 2 * kMB);  // a window: 5 MB in 40 ms, with the first job's halved
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), (0.5 + 5) * kMB / (5 + 40) * 1e3);
}

TEST(BusyRate, IdleTimeDoesNotCount) {
  BusyRate r;
  r.started(0);
  r.finished(10 * kMs, kMB);
  for (int i = 1; i <= 5; ++i) {  // 1 MB in 10 ms, once a second
    r.started(i * 1000 * kMs);
    r.finished(i * 1000 * kMs + 10 * kMs, kMB);
  }
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 100e6);
}

}  // namespace
}  // namespace zipccl
