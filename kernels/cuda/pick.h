// The auto codec's last step on the GPU: the codec that classify.cc's double arithmetic picks
// from the sampled bits of each codec, computed in integers. Host-compilable, so that
// tests/codec/pick_test.cc checks the equivalence for every denominator the sampling makes.
#pragma once

#include <cstdint>

#include "zipccl/format.h"

namespace zipccl::pick {

// classify.cc: ratio_c = bits_c / D (D = 8 * window bytes * windows, at most 2^16), the first
// codec with the smallest ratio below 0.95, else Raw. The bits are integers, so the ratios of
// distinct bits differ by at least 1/D, far more than their rounding: ratio comparisons are
// bits comparisons. And 0.95 as a double lies within 5e-17 below 19/20, where no bits / D but
// 19/20 itself can fall: ratio < 0.95 exactly when 20 bits < 19 D.
ZIPCCL_HD Codec best_codec(const uint32_t (&bits)[3], uint32_t denom) {
  const Codec codecs[3] = {Codec::BF16, Codec::FP16, Codec::FP32};
  Codec best = Codec::Raw;
  uint32_t best_bits = 0;
  for (int k = 0; k < 3; ++k) {
    if (best == Codec::Raw ? 20 * uint64_t(bits[k]) < 19 * uint64_t(denom) : bits[k] < best_bits) {
      best = codecs[k];
      best_bits = bits[k];
    }
  }
  return best;
}

}  // namespace zipccl::pick
