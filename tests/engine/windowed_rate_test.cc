// WindowedRate: the GPU codec's and the link meter's rate over windows of bytes.
#include "windowed_rate.h"

#include <gtest/gtest.h>

namespace zipccl {
namespace {

TEST(WindowedRate, AFirstSampleGivesARateThatIsNotSettled) {
  WindowedRate r(4e6, true);
  EXPECT_EQ(r.bytes_per_s(), 0);
  r.add(1e6, 1e6);  // 1 MB in 1 ms
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 1e9);
  EXPECT_FALSE(r.settled()) << "one sample, a quarter of a window";
  r.add(2e6, 1e6);
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 1e9) << "unchanged until a whole window";
  EXPECT_FALSE(r.settled());
  r.add(2e6, 0.5e6);
  EXPECT_TRUE(r.settled()) << "a whole window after the first sample";
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), (0.5e6 + 4e6) * 1e9 / (0.5e6 + 1.5e6)) << "the first sample halved, then the window";
}

TEST(WindowedRate, WithoutAFirstSampleNothingUntilAWindow) {
  WindowedRate r(4e6, false);
  r.add(3e6, 1e6);
  EXPECT_EQ(r.bytes_per_s(), 0);
  EXPECT_FALSE(r.settled());
  r.add(1e6, 1e6);
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 2e9);
  EXPECT_TRUE(r.settled());
}

TEST(WindowedRate, AFirstSampleOfAWholeWindowIsSettled) {
  WindowedRate r(4e6, true);
  r.add(8e6, 2e6);
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 4e9);
  EXPECT_TRUE(r.settled());
}

}  // namespace
}  // namespace zipccl
