// Where a registered buffer lives. With the GPU codec built in, the plugin's own CUDA runtime
// asks; otherwise, if the process has already loaded a CUDA runtime, its cudaPointerGetAttributes
// is used, and without one memory is host memory. Under NCCL_ZIP_GPU_EMULATE=1 all host memory
// counts as mapped (a CPU thread plays the GPU).
#pragma once

#include <cstdint>

namespace zipccl {

enum class MemKind : uint8_t { kHost, kDevice };

struct MemInfo {
  MemKind kind = MemKind::kHost;
  int device = -1;          // device memory's GPU
  bool gpu_mapped = false;  // host memory pinned and mapped for the GPUs at the same address
  int cuda_type = -1;       // cudaPointerGetAttributes' type (-1: not asked), for logs
};
MemInfo memory_info(const void* p);

}  // namespace zipccl
