// The memory orderings of the codec's completion (launch.cuh's finish_tile() and
// publish_result()), in one place so that gpu_codec_bench's chain floor completes exactly as
// the codec does.
#pragma once

#include <cstdint>

namespace zipccl::gpu::detail {

// Adds 1 to *counter at GPU scope, releasing the caller's earlier writes (and those a barrier
// ordered before it) and acquiring the writes released by earlier adds; returns the old value.
__device__ __forceinline__ uint32_t count_acq_rel(uint32_t* counter) {
  uint32_t old;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
  return old;
}

// Sets *flag to 1 by a release store at system scope: a host polling it sees every write
// ordered before the store once it sees the 1.
__device__ __forceinline__ void set_flag_release_sys(uint8_t* flag) {
  asm volatile("st.release.sys.global.u8 [%0], %1;" ::"l"(flag), "h"(static_cast<unsigned short>(1)) : "memory");
}

}  // namespace zipccl::gpu::detail
