// Staging global memory in shared memory asynchronously: cp.async (sm_80+) per thread, the bulk
// copy engine (sm_90) per CTA.
#pragma once

#include <cstdint>

#include "swizzle.h"
#include "tiling.cuh"

namespace zipccl::gpu::detail {

// 16-byte asynchronous global->shared copy (sm_80+), completed by cp_async_wait().
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most `pending` (0..4) of this thread's committed groups are in flight. The
// instruction takes an immediate, hence the switch (the encoder's block loop is not unrolled).
__device__ __forceinline__ void cp_async_wait(int pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
  }
}

// The bulk copy engine (sm_90 TMA): one thread copies a 16-byte aligned run of bytes (a multiple
// of 16) to shared memory with one instruction, counted on an mbarrier that waiting threads poll.
// On older GPUs (has_bulk_copy() false) the callers stage with cp.async instead.
__device__ __forceinline__ constexpr bool has_bulk_copy() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return true;
#else
  return false;
#endif
}
// Thread 0 of the CTA, once at its start: a barrier that one arrival (with the bytes expected)
// and those bytes complete, phase after phase. (A barrier set up afresh for each tile of a
// resident CTA left compute-sanitizer's racecheck unable to order one tile's copies before the
// next tile's.)
__device__ __forceinline__ void mbar_init(uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(mbar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// Thread 0, before the barrier that precedes every wait: the current phase completes once
// `bytes` have landed from the copies that follow (at once when 0).
__device__ __forceinline__ void mbar_expect(uint64_t* mbar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(mbar)), "r"(bytes)
               : "memory");
#endif
}
// Thread 0, after the barrier that follows the CTA's last generic-proxy accesses to the shared
// memory the bulk copies write next (another tile's): the memory model orders accesses of the
// generic and the async proxy only through this fence.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, uint32_t bytes, uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(bytes), "r"(smem_addr(mbar))
               : "memory");
#endif
}
// Wait until the barrier's phase of parity `parity` has completed (its copies have landed).
__device__ __forceinline__ void mbar_wait(uint64_t* mbar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(mbar)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// Stage rounds * 4 KiB from 16-byte aligned src to chunks first_chunk.. (a multiple of 32) of
// dst: one asynchronous copy per thread and round, no bounds checks.
__device__ __forceinline__ void stage_rounds(uint4* dst, uint32_t first_chunk, const uint8_t* src, uint32_t rounds) {
  uint4* d = dst + first_chunk + swz(threadIdx.x);
  const uint8_t* s = src + 16 * threadIdx.x;
#pragma unroll 1
  for (uint32_t r = 0; r < rounds; ++r) cp_async16(d + kThreads * r, s + 16 * kThreads * r);
}

// Stage len bytes from src into 16-byte chunks at swizzled slots of dst, zero-filling the
// last chunk; asynchronous 16-byte copies when src is 16-byte aligned, by NT threads (t the
// caller's index among them).
// Reads nothing past len. (Its whole-round loop is stage_rounds()'s, kept inline: calling that
// raised the bulk decoder's spill loads from 28 to 356 bytes, ptxas -v.)
template <int NT = kThreads>
__device__ __forceinline__ void stage(uint4* dst, uint32_t first_chunk, const uint8_t* src, uint32_t len,
                                      bool vec, uint32_t t = threadIdx.x) {
  if (vec && len % (16 * NT) == 0) {  // whole rounds: no per-chunk checks
    for (uint32_t c = t; c < len / 16; c += NT) cp_async16(dst + swz(first_chunk + c), src + 16 * c);
    return;
  }
  const uint32_t chunks = (len + 15) / 16;
  for (uint32_t c = t; c < chunks; c += NT) {
    uint8_t* d = reinterpret_cast<uint8_t*>(dst + swz(first_chunk + c));
    if (vec && 16 * c + 16 <= len) {
      cp_async16(d, src + 16 * c);
    } else {
      for (uint32_t i = 0; i < 16; ++i) d[i] = 16 * c + i < len ? src[16 * c + i] : 0;
    }
  }
}

}  // namespace zipccl::gpu::detail
