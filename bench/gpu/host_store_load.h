// A stand-in for NCCL's copies into its host buffers at a collective's start: CTAs of a kernel
// copying device memory into mapped pinned host memory with their own stores, round after round,
// until the host raises a flag. gpu_service_bench times the resident codec beside it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace zipccl::bench {

// Copies `bytes` (a multiple of 16 * ctas) from src to host_dst (a device pointer of mapped
// memory) until *stop (mapped) is nonzero; then CTA c stores the bytes it copied in copied[c]
// (mapped: a CTA's plain store, as host memory need not take a GPU's atomics).
// Loads the kernel now: loaded lazily at its first launch, beside the spinning resident kernel,
// it would hang (../shared/reference/cuda-from-a-plugin.md).
cudaError_t load_host_store_kernel();
cudaError_t launch_host_store_load(const void* src, void* host_dst, size_t bytes, int ctas, const uint32_t* stop,
                                   unsigned long long* copied, cudaStream_t stream);

}  // namespace zipccl::bench
