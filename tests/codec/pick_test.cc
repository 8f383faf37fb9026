// The GPU classifier's last step (kernels/cuda/pick.h) against classify.cc's double arithmetic,
// for every denominator the sampling can produce: 8 * window bytes * windows, with a window of
// n & ~3 bytes (64 <= n < 2048, one window) or 2048 bytes (one to four windows).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "pick.h"

namespace zipccl::pick {
namespace {

std::vector<uint32_t> denominators() {
  std::vector<uint32_t> d;
  for (uint32_t win = 64; win < 2048; win += 4) d.push_back(8 * win);
  for (uint32_t windows = 1; windows <= 4; ++windows) d.push_back(8 * 2048 * windows);
  return d;
}

// classify.cc's choice, as it computes it.
Codec classify_cc(const uint32_t (&bits)[3], uint32_t denom) {
  const Codec codecs[3] = {Codec::BF16, Codec::FP16, Codec::FP32};
  Codec best = Codec::Raw;
  double best_ratio = 0.95;
  for (int k = 0; k < 3; ++k) {
    const double ratio = double(bits[k]) / (double(denom));
    if (ratio < best_ratio) {
      best_ratio = ratio;
      best = codecs[k];
    }
  }
  return best;
}

// The two facts pick.h rests on, for all bits up to twice the denominator (a codec's bits are
// at most ~1.2 times it): the threshold, and ratios ordered as the bits are.
TEST(Pick, ThresholdAndOrderAsInDoubles) {
  for (uint32_t d : denominators()) {
    for (uint32_t b = 0; b < 2 * d; ++b) {
      ASSERT_EQ(20 * uint64_t(b) < 19 * uint64_t(d), double(b) / double(d) < 0.95) << "bits " << b << " D " << d;
      ASSERT_LT(double(b) / double(d), double(b + 1) / double(d)) << "bits " << b << " D " << d;
    }
  }
}

// Ties between codecs (the first wins), bits at the 0.95 threshold, and random triples.
TEST(Pick, BestCodecAsClassifyCc) {
  std::mt19937 g(5);
  for (uint32_t d : denominators()) {
    const uint32_t at = d * 19 / 20;
    std::vector<uint32_t> v = {0, 1, at - 1, at, at + 1, d, 2 * d - 1};
    for (int i = 0; i < 8; ++i) v.push_back(g() % (2 * d));
    for (uint32_t a : v)
      for (uint32_t b : v)
        for (uint32_t c : v) {
          const uint32_t bits[3] = {a, b, c};
          ASSERT_EQ(best_codec(bits, d), classify_cc(bits, d)) << a << " " << b << " " << c << " D " << d;
        }
  }
}

}  // namespace
}  // namespace zipccl::pick
