// A block's window base in the encoder: format.h's window_base() in 32-bit arithmetic, the
// reduction of a block's exponents over the CTA that feeds it, and the base's refinement
// (refine_window_base()) over the CTA.
#pragma once

#include <cstdint>

#include "cta.cuh"
#include "encode_shared.cuh"
#include "lanes.h"
#include "tiling.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

// window_base() of format.h for one block (exp_sum < 2^21, exp_count <= 4096): the same
// result with 32-bit arithmetic, as 64-bit division costs ~100 instructions on the GPU, and
// without branches, so that the classifier's three interleave (a zero count has a zero sum, so
// num <= 0 gives 0 as window_base()'s early returns do; floor(num / (1024 c)) is
// floor(floor(num / 1024) / c)).
template <Codec C>
__device__ __forceinline__ uint32_t block_window_base(uint32_t exp_sum, uint32_t exp_count) {
  constexpr uint32_t kMaxBase = Geom<C>::kExpMax - (kWindow - 1);
  const int32_t num = int32_t(exp_sum * 1024) - int32_t(kWindowOffsetQ10) * int32_t(exp_count);
  return min((uint32_t(max(num, 0)) >> 10) / max(exp_count, 1u), kMaxBase);
}

// The block's window base from each thread's exponent sum and nonzero count, packed in one word
// (a warp's sum < 32 * 32 * 255 < 2^lanes::kCountShift, its count <= 1024): warp sums, then
// thread 0 adds the NW warps' and computes the base once for the CTA.
template <Codec C, int NW>
__device__ __forceinline__ uint32_t cta_window_base(uint32_t s, EncShared& sh, int m) {
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t sum = 0, count = 0;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      sum += sh.red[w] & ((1u << lanes::kCountShift) - 1);
      count += sh.red[w] >> lanes::kCountShift;
    }
    sh.base[m] = block_window_base<C>(sum, count);
  }
  __syncthreads();
  return sh.base[m];
}

// refine_window_base() of format.h over the CTA, from each thread's share of the escapes that
// moving block m's window down or up by one would add, each plus PT (so the CTA's sums, biased
// by kBlockElems, are < 2 * kBlockElems and share one word): warp sums, then every thread adds
// the NW warps' and refines alike; thread 0 keeps the result in sh.base[m], which the block's
// header takes.
template <Codec C, int NW>
__device__ __forceinline__ uint32_t cta_refine_base(uint32_t down, uint32_t up, uint32_t base, EncShared& sh, int m) {
  static_assert(2 * kBlockElems < 65536, "biased sums fit 16 bits");
  const uint32_t s = warp_sum(down | up << 16);
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = s;
  __syncthreads();
  uint32_t t = 0;
#pragma unroll
  for (int w = 0; w < NW; ++w) t += sh.red[w];
  base = refine_window_base(C, base, int32_t(t & 0xFFFF) - int32_t(kBlockElems), int32_t(t >> 16) - int32_t(kBlockElems));
  if (threadIdx.x == 0) sh.base[m] = base;
  return base;
}

}  // namespace
}  // namespace zipccl::gpu::detail
