#include "registration.h"

#include <mutex>

#include "codec_engine.h"
#include "comm.h"
#include "engine_params.h"
#include "log.h"
#include "resident_gpus.h"

namespace zipccl {
namespace {

bool device_has_gdr(const DeviceInfo& d) { return d.gdr_peermem || d.gdr_dmabuf; }

// NCCL_ZIP_GDR: GPUDirect RDMA where a device supports it. Auto leaves device buffers to host
// staging (where the codecs reach them) when compression is forced.
bool decide_gdr(const Transport& t) {
  const int64_t want = gdr_mode();
  if (want == 0) return false;
  bool any = false;
  for (int d = 0; d < t.num_devices(); ++d) any |= device_has_gdr(t.device(d));
  if (!any) {
    if (want == 1)
      ZIP_WARN("NCCL_ZIP_GDR=1 ignored: no device supports GPUDirect RDMA (neither nvidia-peermem nor DMA-BUF "
               "registration)");
    return false;
  }
  return want == 1 || zip_mode() != ZipMode::kAlways;
}

}  // namespace

DevicePath decide_device_path(const Transport& t) {
  DevicePath p;
  const char* resident_why = "";
  p.resident = resident_usable(&resident_why);
  if (p.resident)
    ZIP_INFO(NCCL_INIT | NCCL_NET, "host buffers: coded by the resident GPU codec where NCCL's buffers are "
             "mapped for the GPU (NCCL_ZIP_GPU=%lld), else by the CPU", (long long)gpu_enabled());
  else
    ZIP_INFO(NCCL_INIT | NCCL_NET, "host buffers: coded by the CPU (%s)", resident_why);
  p.gdr = decide_gdr(t);
  set_resident_device_staging(p.gdr && p.resident);
  if (p.gdr && p.resident)
    ZIP_INFO(NCCL_INIT | NCCL_NET, "device buffers: GPUDirect RDMA, coded by the resident GPU codec through "
             "device staging while its kernel runs, raw otherwise (NCCL_ZIP_GDR=0 stages everything through host "
             "memory)");
  else if (p.gdr)
    ZIP_INFO(NCCL_INIT | NCCL_NET, "device buffers: GPUDirect RDMA, sent raw (compression applies to what NCCL "
             "stages through host memory; NCCL_ZIP_GDR=0 stages everything there)");
  else
    ZIP_INFO(NCCL_INIT | NCCL_NET, "device buffers: ptrSupport HOST only; NCCL stages GPU data through host memory");
  return p;
}

ncclResult_t register_buffer(Comm* c, const DeviceInfo& dev, const DevicePath& path, void* data, size_t size,
                             bool announced_device, int dmabuf_fd, uint64_t offset, Mr** out) {
  *out = nullptr;
  MemInfo info = memory_info(data);
  // NCCL_ZIP_GPU_EMULATE (tests): a CPU thread plays the GPU, and host memory announced as the
  // GPU's plays its memory.
  if (announced_device && gpu_emulate() && info.kind == MemKind::kHost) {
    info.kind = MemKind::kDevice;
    info.device = 0;
  }
  const MemKind kind = info.kind;
  if (announced_device && kind != MemKind::kDevice) {
    ZIP_WARN("regMr: %p (%zu bytes) announced as device memory, but CUDA does not know it as such", data, size);
    return ncclInvalidUsage;
  }
  const bool device = kind == MemKind::kDevice;
  if (device && !path.gdr) {
    ZIP_WARN("regMr: %p (%zu bytes) is memory of GPU %d, which this plugin cannot move (ptrSupport HOST)", data,
             size, info.device);
    return ncclInvalidUsage;
  }
  bool gpu_mapped = false;
  if (path.resident) {
    std::lock_guard<std::mutex> g(c->mutex());
    if (device)
      gpu_mapped = c->use_resident_device(dev);
    else if (info.gpu_mapped)
      gpu_mapped = c->use_resident();
    else
      c->note_unmapped(data, size, info.cuda_type);
  }
  const bool flag_polled = c->kind() == Comm::kRecv &&
                           (int64_t(size) == ll_buffsize() || int64_t(size) == ll128_buffsize());
  const bool flushed = device && c->kind() == Comm::kRecv && dev.gdr_flush;
  std::unique_ptr<Mr> mr(new Mr{static_cast<char*>(data), size, kind, gpu_mapped, flag_polled, flushed, nullptr});
  // RDMA keys, for transports that need them.
  const ncclResult_t r = device ? c->link().reg_device_mem(data, size, dmabuf_fd, offset, flushed, &mr->reg)
                                : c->link().reg_mem(data, size, &mr->reg);
  if (r != ncclSuccess) return r;
  ZIP_TRACE("regMr %p %zu bytes, %s%s%s", data, size,
            device            ? (dmabuf_fd >= 0 ? "device, GPUDirect (dmabuf)" : "device, GPUDirect")
            : gpu_mapped      ? "host, mapped for the GPU codec"
            : info.gpu_mapped ? "host, mapped (GPU codec off)"
                              : "host, not mapped for the GPU: CPU codec",
            device && gpu_mapped ? ", GPU codec" : "", flag_polled ? " (LL/LL128 buffer: never compressed)" : "");
  *out = mr.release();
  return ncclSuccess;
}

void deregister_buffer(Mr* mr) {
  if (!mr) return;
  delete mr;
}

}  // namespace zipccl
