// Phase clocks of an instrumented build (CMake -DZIPCCL_GPU_TRACE=ON, scripts/device-gpu.sh
// trace): thread 0 of each of the first kTraceTiles CTAs of a launch records clock64() at the
// kernel's phase boundaries (ZIPCCL_MARK) and %globaltimer at its entry and exit
// (ZIPCCL_MARK_TIME), read back after the launch with read_encode_trace() /
// read_decode_trace(). Each kernel's file has its own record. In other builds the marks are
// empty statements.
#pragma once

#ifdef ZIPCCL_GPU_TRACE
#include "clock.cuh"
#include "zipccl/gpu_codec.h"

namespace zipccl::gpu::detail {

static __device__ unsigned long long g_trace[kTraceTiles][kTraceSlots];

__device__ __forceinline__ void trace_mark(int slot, bool wall) {
  if (threadIdx.x != 0 || blockIdx.x >= kTraceTiles) return;
  g_trace[blockIdx.x][slot] = wall ? globaltimer_ns() : clock64();
}

}  // namespace zipccl::gpu::detail

#define ZIPCCL_MARK(slot) ::zipccl::gpu::detail::trace_mark(slot, false)
#define ZIPCCL_MARK_TIME(slot) ::zipccl::gpu::detail::trace_mark(slot, true)
#else
#define ZIPCCL_MARK(slot) ((void)0)
#define ZIPCCL_MARK_TIME(slot) ((void)0)
#endif
