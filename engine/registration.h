// NCCL's buffers as the engine sees them after regMr: where they live, whether NCCL polls flags
// inside them (LL/LL128), and how their bytes reach the network. Also how this process handles
// device buffers at all, decided once at init.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mem_kind.h"
#include "transport.h"

namespace zipccl {

class Comm;

// How device buffers are handled in this process. Neither: NCCL is offered host buffers only
// and stages GPU data through host memory itself.
struct DevicePath {
  bool gpu_codec = false;  // staged through pinned mirrors, coded by the GPU codec (NCCL_ZIP_GPU=2)
  bool gdr = false;        // moved by the HCA itself, raw (GPUDirect RDMA, NCCL_ZIP_GDR)
  bool resident = false;   // host buffers the GPU maps coded by the resident GPU codec (NCCL_ZIP_GPU>=1)
};
// Logs the decision and why.
DevicePath decide_device_path(const Transport& t);

struct Mr {
  char* base;
  size_t size;
  MemKind kind;
  // Host memory pinned and mapped for the GPU at the same address (NCCL's host buffers are): the
  // resident GPU codec may read and write it.
  bool gpu_mapped;
  // NCCL's kernel polls flags inside this buffer (LL/LL128): recognised by size, since NCCL
  // registers each protocol's buffer separately with NCCL_LL_BUFFSIZE / NCCL_LL128_BUFFSIZE bytes.
  bool flag_polled;
  // Device memory on the GPU codec's path: a pinned host buffer of the same size, allocated at
  // registration. A message at base + o is staged at mirror + o (sent raw, compressed, or
  // received), so the data path never allocates pinned memory: cudaHostAlloc may synchronise the
  // device, and NCCL's kernel may be waiting for this very message.
  char* mirror;
  // Device memory the transport moves itself (GPUDirect RDMA): no mirror, always raw.
  bool direct;
  // Receives into it are flushed when NCCL asks (iflush): direct memory on a device that needs it.
  bool flushed;
  // The transport's registration (RDMA keys) of what goes on the wire: the buffer itself, or for
  // device memory its mirror. Null for transports that need none.
  std::unique_ptr<MemReg> reg;

  // The mirror of a message of `bytes` at `data`, or null when it lies outside this buffer.
  char* mirror_of(const void* data, size_t bytes) const {
    const char* p = static_cast<const char*>(data);
    if (!mirror || p < base || bytes > size || size_t(p - base) > size - bytes) return nullptr;
    return mirror + (p - base);
  }
};

// regMr and regMrDmaBuf (dmabuf_fd >= 0: device memory exported by CUDA) on comm c made on device
// `dev`. announced_device: NCCL said the memory is the GPU's (NCCL_PTR_CUDA / DMA-BUF).
ncclResult_t register_buffer(Comm* c, const DeviceInfo& dev, const DevicePath& path, void* data, size_t size,
                             bool announced_device, int dmabuf_fd, uint64_t offset, Mr** out);
void deregister_buffer(Mr* mr);

}  // namespace zipccl
