// The process's resident GPU codecs, one per CUDA device, each with its pinned staging arena (and,
// with GPUDirect RDMA, a device staging arena) and its codec engine (the CPU engine behind it):
// made by the first comm that registers memory the GPU can address (on NCCL's service thread,
// where CUDA calls may block), destroyed with the last comm that uses it.
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
  // Device memory for device buffers' compressed messages, which the HCA moves (GPUDirect RDMA);
  // null without set_resident_device_staging(true) or when it could not be had (logged).
  std::shared_ptr<StagingArena> device_arena;
  int device_arena_fd = -1;  // a DMA-BUF of device_arena for HCAs without nvidia-peermem, or -1
  std::unique_ptr<ResidentEngine> engine;
  std::shared_ptr<EmulatedServiceDevice::Control> emulation;  // NCCL_ZIP_GPU_EMULATE only
  // Auto mode's waits for the stopped kernel (ColdWait) of the comms closed so far, and of them
  // those that ran out; under the registry's lock.
  uint64_t cold_waits = 0, vain_waits = 0;
};

// Whether host buffers may be coded by the resident codec: NCCL_ZIP_GPU >= 1 and a CUDA device,
// or NCCL_ZIP_GPU_EMULATE=1; *why says why not. From init(): creates no context.
bool resident_usable(const char** why);
// The device of the calling thread's CUDA context (NCCL's threads: the communicator's GPU), 0
// under emulation, -1 when there is none.
int resident_device();
// Null (logged) when it cannot be made. Every acquire is released.
ResidentGpu* acquire_resident(int device);
// waits / vain: the releasing comm's waits for the stopped kernel, and how many ran out. The last
// release warns where most of the process's ran out: starts slower than NCCL_ZIP_GPU_WAIT_US.
void release_resident(int device, uint64_t waits, uint64_t vain);
// Every resident codec of the process starts its kernel for work that comes soon
// (ResidentCodec::prewarm()); from any thread, no CUDA call.
void prewarm_residents();
// The link the resident kernels serve (bytes/s, device 0's configured speed; 0: unknown), set
// by the net plugin's init before any comm: it sizes their CTAs.
void set_resident_link(double link_bps);
// Whether resident codecs made from now on get a device staging arena (GPUDirect RDMA in use).
void set_resident_device_staging(bool on);
// CTAs of a resident kernel: NCCL_ZIP_GPU_CTAS, else (0) enough to code the link's rate in both
// directions with the policy's margin at the nominal rate per CTA, 4 to 16 (16 for an unknown
// link; 8 at 32 Gb/s). Packed two to an SM where an SM partition can be had (resident_cuda.cc),
// one to an SM otherwise: SMs the application's kernels lose while the kernel is resident. A
// partition rounded up to its split's granularity is filled: 10 CTAs ask for 5 SMs, an H200 gives
// 6, the kernel runs 12 (the tuner plans with the count asked, which every rank computes alike).
int resident_ctas();
// The coding rate to plan with where every rank must plan alike (the tuner): nominal, from the
// configuration, not measured. Encoding and decoding at once, bytes/s, as coding_rate() counts:
// 0.65 GB/s per resident CTA of NCCL's pinned host buffers (through NCCL, two ranks on one GPU,
// 8 CTAs each kept a 4 GB/s link full at ratio 0.70: >= 0.69 GB/s a CTA), a CPU worker ~1 GB/s
// (docs/benchmarks.md).
double nominal_coding_rate(bool resident);

// The CUDA side (resident_cuda.cc; gpu_codec_none.cc without CUDA).
bool cuda_device_present(std::string* why);
int current_cuda_device();
char* alloc_mapped(size_t bytes, std::string* err);  // pinned, portable, mapped at the same address
void free_mapped(char* p);
char* alloc_device(int device, size_t bytes, std::string* err);  // cudaMalloc
void free_device(int device, char* p);
// A DMA-BUF fd of [p, p + bytes) (cuMemGetHandleForAddressRange), or -1 (*err says why).
int export_dmabuf(int device, char* p, size_t bytes, std::string* err);

}  // namespace zipccl
