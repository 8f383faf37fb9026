// Warp- and CTA-wide building blocks of both kernels: sums, exclusive scans, and a copy.
#pragma once

#include <cstdint>

#include "tiling.cuh"

namespace zipccl::gpu::detail {

__device__ __forceinline__ uint32_t warp_sum(uint32_t x) {
#if __CUDA_ARCH__ >= 800
  return __reduce_add_sync(~0u, x);  // one REDUX instead of five shuffles and adds
#else
  for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(~0u, x, o);
  return x;
#endif
}
__device__ __forceinline__ uint64_t warp_sum64(uint64_t x) {
  for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(~0u, x, o);
  return x;
}

// M (at most 4) independent exclusive prefix sums over the CTA in thread order, of per-thread
// values <= 32 (escape counts of a thread's 16 or 32 elements of a block) over NW warps;
// total[m] gets the sums.
// Two sums travel as the 16-bit halves of a word (a CTA's sum is at most 4096), so one warp
// scan per pair and one barrier serve them all; sh is written once per tile (callers scan
// once), so no barrier after the reads.
template <int M, int NW = kWarps>
__device__ __forceinline__ void cta_scans(uint32_t (&x)[M], uint32_t (&total)[M], uint32_t (*sh)[kMaxUnitBlocks / 2]) {
  static_assert(M >= 1 && M <= kMaxUnitBlocks, "two sums per word");
  constexpr int K = (M + 1) / 2;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t xs[2 * K] = {}, v[K], inc[K];
#pragma unroll
  for (int m = 0; m < M; ++m) xs[m] = x[m];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    v[k] = xs[2 * k] | xs[2 * k + 1] << 16;
    inc[k] = v[k];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(~0u, inc[k], o);
      if (lane >= o) inc[k] += y;
    }
    if (lane == 31) sh[w][k] = inc[k];
  }
  __syncthreads();
  uint32_t ts[2 * K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    uint32_t t = lane < NW ? sh[lane][k] : 0;  // the warp sums in lanes 0..NW-1
    // The total first, in one instruction (the encoder publishes it to its successors at
    // once), then this warp's offset from an inclusive scan of the warp sums.
    const uint32_t all = __reduce_add_sync(~0u, t);
#pragma unroll
    for (int o = 1; o < NW; o <<= 1) {
      const uint32_t y = __shfl_up_sync(~0u, t, o);
      if (lane >= o) t += y;
    }
    const uint32_t before = __shfl_sync(~0u, t, (w + 31) & 31);
    const uint32_t excl = (w ? before : 0) + inc[k] - v[k];
    xs[2 * k] = excl & 0xFFFF;
    xs[2 * k + 1] = excl >> 16;
    ts[2 * k] = all & 0xFFFF;
    ts[2 * k + 1] = all >> 16;
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    x[m] = xs[m];
    total[m] = ts[m];
  }
}

// Copy n elements with the whole CTA of NT threads, each thread loading kCopyBatch of them
// before it stores any: a thread's loads then wait for one round trip per batch, not one each
// (from pinned host memory a round trip over PCIe is microseconds), and the stores, which may
// alias the loads as far as the compiler knows, no longer order every load after the last store.
constexpr int kCopyBatch = 8;
template <int NT, typename T>
__device__ __forceinline__ void cta_copy_batched(T* dst, const T* src, uint64_t n) {
  for (uint64_t i = threadIdx.x; i < n; i += uint64_t(kCopyBatch) * NT) {
    T v[kCopyBatch];
#pragma unroll
    for (int k = 0; k < kCopyBatch; ++k)
      if (i + uint64_t(k) * NT < n) {
        if constexpr (sizeof(T) == 16)
          v[k] = __ldcs(src + i + uint64_t(k) * NT);
        else
          v[k] = src[i + uint64_t(k) * NT];
      }
#pragma unroll
    for (int k = 0; k < kCopyBatch; ++k)
      if (i + uint64_t(k) * NT < n) dst[i + uint64_t(k) * NT] = v[k];
  }
}

// Copy len bytes with the whole CTA of NT threads (16-byte vectors when both sides allow it).
template <int NT = kThreads>
__device__ __forceinline__ void cta_copy(uint8_t* dst, const uint8_t* src, uint64_t len) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const uint64_t nv = len / 16;
    cta_copy_batched<NT>(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), nv);
    for (uint64_t i = nv * 16 + threadIdx.x; i < len; i += NT) dst[i] = src[i];
  } else {
    cta_copy_batched<NT>(dst, src, len);
  }
}

}  // namespace zipccl::gpu::detail
