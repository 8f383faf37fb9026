// The GPU's wall clock, %globaltimer in ns: the resident kernel's job and tile times, the trace
// build's entry and exit marks, and the benchmark's gate.
#pragma once

namespace zipccl::gpu::detail {

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace zipccl::gpu::detail
