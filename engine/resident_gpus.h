// The process's resident GPU codecs, one per CUDA device, each with its pinned staging arena and
// its codec engine (the CPU engine behind it): made by the first comm that registers host memory
// the GPU can address (on NCCL's service thread, where CUDA calls may block), destroyed with the
// last comm that uses it.
#pragma once

#include <memory>
#include <string>

#include "emulated_service.h"
#include "staging_arena.h"
#include "resident_codec.h"
#include "resident_engine.h"

namespace zipccl {

struct ResidentGpu {
  int device;
  std::shared_ptr<ResidentCodec> codec;
  std::shared_ptr<StagingArena> arena;
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
// The link the resident kernels serve (bytes/s, device 0's configured speed; 0: unknown), set
// by the net plugin's init before any comm: it sizes their CTAs.
void set_resident_link(double link_bps);
// CTAs of a resident kernel: NCCL_ZIP_GPU_CTAS, else (0) enough to code the link's rate in both
// directions with the policy's margin at the nominal rate per CTA, 4 to 16 (16 for an unknown
// link). Each holds an SM that the application's kernels lose while the kernel is resident.
int resident_ctas();
// The coding rate to plan with where every rank must plan alike (the tuner): nominal, from the
// configuration, not measured. Encoding and decoding at once, bytes/s, as coding_rate() counts:
// a resident CTA codes ~0.5 GB/s of NCCL's pinned host buffers (16 CTAs: 6.5-12.8 GB/s measured
// through NCCL on an H200 shared by two ranks), a CPU worker ~1 GB/s (docs/benchmarks.md).
double nominal_coding_rate(bool resident);

// The CUDA side (resident_cuda.cc; gpu_codec_none.cc without CUDA).
bool cuda_device_present(std::string* why);
int current_cuda_device();
char* alloc_mapped(size_t bytes, std::string* err);  // pinned, portable, mapped at the same address
void free_mapped(char* p);

}  // namespace zipccl
