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

// How buffers are handled in this process. Without GPUDirect RDMA NCCL is offered host buffers
// only and stages GPU data through host memory itself.
struct DevicePath {
  bool gdr = false;        // device buffers moved by the HCA itself (GPUDirect RDMA, NCCL_ZIP_GDR)
  bool resident = false;   // host buffers the GPU maps, and device buffers under gdr, coded by the
                           // resident GPU codec (NCCL_ZIP_GPU=1)
};
// Logs the decision and why.
DevicePath decide_device_path(const Transport& t);

struct Mr {
  char* base;
  size_t size;
  MemKind kind;
  // The resident GPU codec may read and write it: host memory pinned and mapped for the GPU at
  // the same address (NCCL's host buffers are), or device memory whose comm has device staging.
  bool gpu_mapped;
  // NCCL's kernel polls flags inside this buffer (LL/LL128): recognised by size, since NCCL
  // registers each protocol's buffer separately with NCCL_LL_BUFFSIZE / NCCL_LL128_BUFFSIZE bytes.
  bool flag_polled;
  // Receives into it are flushed when NCCL asks (iflush): device memory (moved by the transport
  // itself, GPUDirect RDMA) on a device that needs it.
  bool flushed;
  // The transport's registration (RDMA keys) of the buffer. Null for transports that need none.
  std::unique_ptr<MemReg> reg;
};

// regMr and regMrDmaBuf (dmabuf_fd >= 0: device memory exported by CUDA) on comm c made on device
// `dev`. announced_device: NCCL said the memory is the GPU's (NCCL_PTR_CUDA / DMA-BUF).
ncclResult_t register_buffer(Comm* c, const DeviceInfo& dev, const DevicePath& path, void* data, size_t size,
                             bool announced_device, int dmabuf_fd, uint64_t offset, Mr** out);
void deregister_buffer(Mr* mr);

}  // namespace zipccl
