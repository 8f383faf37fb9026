// Each tile's offset in the escape section, by a single-pass decoupled look-back scan (Merrill &
// Garland) over the tiles' state words.
#pragma once

#include <cstdint>

#include "cta.cuh"

namespace zipccl::gpu::detail {
namespace {

// A tile's state word: flag (bits 62-63) and escape bytes (bits 0-31) for the look-back; in
// bulk launches also the tile's own escape bytes (bits 32-47, at most 4 x 2560) and whether its
// chunks wait in temp (kDeferred), for encode_fixup_kernel.
__device__ constexpr unsigned long long kAggregate = 1ull << 62;  // escape bytes of this tile only
__device__ constexpr unsigned long long kInclusive = 2ull << 62;  // escape bytes up to and with it
__device__ constexpr unsigned long long kDeferred = 1ull << 61;
__device__ __forceinline__ uint32_t own_escapes(unsigned long long s) {
  return static_cast<uint32_t>(s >> 32) & 0xFFFF;
}

// Exclusive prefix of escape bytes before tile b, by warp 0 (decoupled look-back).
__device__ uint64_t look_back(unsigned long long* st, uint32_t b) {
  const int lane = threadIdx.x & 31;
  uint64_t excl = 0;
  int64_t pred = int64_t(b) - 1;
  for (;;) {
    const int64_t idx = pred - lane;
    const unsigned long long s =
        idx >= 0 ? *reinterpret_cast<volatile unsigned long long*>(st + idx) : kInclusive;
    const uint32_t flag = uint32_t(s >> 62);
    const unsigned invalid = __ballot_sync(~0u, flag == 0);
    const unsigned incl = __ballot_sync(~0u, flag == 2);
    const unsigned need = incl ? ((incl & (0u - incl)) - 1) | (incl & (0u - incl)) : ~0u;
    if (invalid & need) {
      __nanosleep(20);
      continue;
    }
    excl += warp_sum64((need >> lane) & 1 ? (s & 0xFFFFFFFFull) : 0);
    if (incl) return excl;
    pred -= 32;
  }
}

}  // namespace
}  // namespace zipccl::gpu::detail
