// The process's resident GPU codecs, one per CUDA device, each with its pinned staging arena and
// its codec engine (the CPU engine behind it): made by the first comm that registers host memory
// the GPU can address (on NCCL's service thread, where CUDA calls may block), destroyed with the
// last comm that uses it.
#pragma once

#include <memory>
#include <string>

#include "emulated_service.h"
#include "pinned_arena.h"
#include "resident_codec.h"
#include "resident_engine.h"

namespace zipccl {

struct ResidentGpu {
  int device;
  std::shared_ptr<ResidentCodec> codec;
  std::shared_ptr<PinnedArena> arena;
  std::unique_ptr<ResidentEngine> engine;
  std::shared_ptr<EmulatedServiceDevice::Control> emulation;  // NCCL_ZIP_GPU_EMULATE only
};

// Whether host buffers may be coded by the resident codec: NCCL_ZIP_GPU >= 1 and a CUDA device,
// or NCCL_ZIP_GPU_EMULATE=1; *why says why not. From init(): creates no context.
bool resident_usable(const char** why);
// The device of the calling thread's CUDA context (NCCL's threads: the communicator's GPU), 0
// under emulation, -1 when there is none.
int resident_device();
// Null (logged) when it cannot be made. Every acquire is released.
ResidentGpu* acquire_resident(int device);
void release_resident(int device);
// The best coding_rate() of the resident codecs in use (bytes/s), 0 when none has one.
double resident_coding_rate();

// The CUDA side (resident_cuda.cc; gpu_codec_none.cc without CUDA).
bool cuda_device_present(std::string* why);
int current_cuda_device();
char* alloc_mapped(size_t bytes, std::string* err);  // pinned, portable, mapped at the same address
void free_mapped(char* p);

}  // namespace zipccl
