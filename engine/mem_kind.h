// Where a registered buffer lives. With the GPU codec built in, the plugin's own CUDA runtime
// asks; otherwise, if the process has already loaded a CUDA runtime, its cudaPointerGetAttributes
// is used, and without one memory is host memory.
#pragma once

#include <cstdint>

namespace zipccl {

enum class MemKind : uint8_t { kHost, kDevice };

// *device: the CUDA device of device memory, else -1.
MemKind memory_kind(const void* p, int* device);

}  // namespace zipccl
