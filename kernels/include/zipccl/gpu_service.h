// The resident GPU codec's CUDA side (protocol: zipccl/service_protocol.h): its device state,
// its module load and its launch, for a thread that may block.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "zipccl/service_protocol.h"
#ifdef ZIPCCL_GPU_TRACE
#include "zipccl/gpu_codec.h"  // kTraceTiles, kTraceSlots
#endif

namespace zipccl::gpu {

// The device memory the kernel keeps its state in (cudaMalloc), and its zeroing before the
// first launch (launches leave it ready for the next).
size_t service_device_bytes();
cudaError_t service_init(void* device_mem, cudaStream_t stream);
// Loads the kernel's module now (lazy loading would load it at the first launch, which waits
// for any kernel that is running, NCCL's spinning ones included), for the current device, and
// says in *staging whether launches there can stage: give each CTA a second tile buffer, in which
// it stages its next encode tile while it codes one. They can where two CTAs with both buffers
// fit on an SM (sm_80, sm_90: yes; sm_86, sm_89: no).
cudaError_t service_load(bool* staging);
// Launches generation `generation` (> 0, increasing) with `ctas` CTAs, staging as service_load()
// allows or with one buffer (staging false). host: the device pointer of the mapped ServiceHost
// (cudaHostGetDevicePointer).
cudaError_t service_launch(ServiceHost* host, void* device_mem, int ctas, uint32_t generation, bool staging,
                           cudaStream_t stream);

#ifdef ZIPCCL_GPU_TRACE
// Per CTA (kernels/cuda/trace.cuh), of the last launch once it has exited: slots 0, 1, 8, 9,
// 10 the clocks of its last tile as in the launched kernels; 11 its tiles; 12-15 thread 0's
// cycles waiting for a ticket, finding its slot, in tiles, releasing them.
cudaError_t read_service_trace(unsigned long long (*out)[kTraceSlots]);
#endif

}  // namespace zipccl::gpu
