// When a call that finds the resident kernel stopped waits for it (cold_wait.h): for the wait
// time, then raw; after a wait in vain a pause of 1 ms, doubling with each wait in vain up to
// 100 ms (a launcher stuck in a CUDA call costs one wait per pause); a wait that the start ends in
// time sets the pause back, a kernel found running between waits does not.
#include "cold_wait.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace zipccl {
namespace {

constexpr int64_t kUs = 1000, kMs = 1000 * kUs;
constexpr int64_t kT0 = 1000 * 1000 * kMs;  // a steady clock's reading
constexpr int64_t kWait = 200 * kUs;

// Cold from t: true through the wait, false (in vain) at its end; returns that time.
int64_t wait_in_vain(ColdWait* w, int64_t t) {
  EXPECT_TRUE(w->wait(false, t));
  EXPECT_TRUE(w->wait(false, t + kWait - 1));
  EXPECT_FALSE(w->wait(false, t + kWait));
  return t + kWait;
}

TEST(ColdWait, WaitsForTheWaitTimeThenGoesRaw) {
  ColdWait w(kWait);
  wait_in_vain(&w, kT0);
  EXPECT_EQ(w.waits(), 1u);
  EXPECT_EQ(w.vain(), 1u);
}

TEST(ColdWait, AKernelThatStartsInTimeEndsTheWait) {
  ColdWait w(kWait);
  EXPECT_TRUE(w.wait(false, kT0));
  EXPECT_FALSE(w.wait(true, kT0 + 80 * kUs));
  EXPECT_TRUE(w.wait(false, kT0 + 10 * kMs)) << "a later cold start is waited for again";
  EXPECT_EQ(w.waits(), 2u);
  EXPECT_EQ(w.vain(), 0u);
}

TEST(ColdWait, AfterAWaitInVainItPausesOneMillisecond) {
  ColdWait w(kWait);
  const int64_t t = wait_in_vain(&w, kT0);
  EXPECT_FALSE(w.wait(false, t + 1));
  EXPECT_FALSE(w.wait(false, t + kMs - 1));
  EXPECT_TRUE(w.wait(false, t + kMs)) << "a slow start must not cost the next collective its wait";
}

// n waits in vain in a row, each followed by its pause (1, 2, 4 ... ms, at most 100), the kernel
// running meanwhile (started late) or not; returns the last pause.
int64_t pauses_double(ColdWait* w, int n, bool running_between) {
  int64_t t = kT0, pause = kMs, last = 0;
  for (int i = 0; i < n; ++i) {
    t = wait_in_vain(w, t);
    if (running_between) {
      EXPECT_FALSE(w->wait(true, t + 300 * kUs));
    }
    EXPECT_FALSE(w->wait(false, t + pause - 1)) << "wait " << i;
    t += pause;
    last = pause;
    pause = std::min(2 * pause, ColdWait::kMaxPauseNs);
  }
  EXPECT_EQ(w->vain(), uint64_t(n));
  return last;
}

// A launcher stuck for good: pauses of 1, 2, 4 ... ms, then one wait per 100 ms.
TEST(ColdWait, PausesDoubleWhileWaitsStayInVain) {
  ColdWait w(kWait);
  EXPECT_EQ(pauses_double(&w, 12, false), 100 * kMs);
}

TEST(ColdWait, AStartWithinTheWaitSetsThePauseBack) {
  ColdWait w(kWait);
  int64_t t = kT0;
  for (int i = 0; i < 5; ++i) t = wait_in_vain(&w, t) + 100 * kMs;
  EXPECT_TRUE(w.wait(false, t));
  EXPECT_FALSE(w.wait(true, t + 90 * kUs));
  t = wait_in_vain(&w, t + kMs);
  EXPECT_TRUE(w.wait(false, t + kMs)) << "the pause started over at 1 ms";
}

// Every start slower than the wait, the kernel running through each collective in between: the
// pauses still grow, or each collective would pay a wait in vain.
TEST(ColdWait, AKernelRunningBetweenWaitsInVainKeepsThePauseGrowing) {
  ColdWait w(kWait);
  EXPECT_EQ(pauses_double(&w, 4, true), 8 * kMs);
}

TEST(ColdWait, ZeroNeverWaits) {
  ColdWait w(0);
  EXPECT_FALSE(w.wait(false, kT0));
  EXPECT_EQ(w.waits(), 0u);
}

}  // namespace
}  // namespace zipccl
