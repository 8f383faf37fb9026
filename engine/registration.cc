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
// staging (where the codecs reach them) when compression is forced, and to the GPU codec when it
// stages them.
bool decide_gdr(const Transport& t, bool gpu_codec) {
  const int64_t want = gdr_mode();
  if (want == 0) return false;
  bool any = false;
  for (int d = 0; d < t.num_devices(); ++d) any |= device_has_gdr(t.device(d));
  if (!any || gpu_codec) {
    if (want == 1)
      ZIP_WARN("NCCL_ZIP_GDR=1 ignored: %s", gpu_codec ? "NCCL_ZIP_GPU=2 stages device buffers through the GPU codec"
                                                      : "no device supports GPUDirect RDMA (neither nvidia-peermem "
                                                        "nor DMA-BUF registration)");
    return false;
  }
  return want == 1 || zip_mode() != ZipMode::kAlways;
}

}  // namespace

DevicePath decide_device_path(const Transport& t) {
  DevicePath p;
  const char* why = "";
  const char* resident_why = "";
  p.resident = resident_usable(&resident_why);
  if (p.resident)
    ZIP_INFO(NCCL_INIT | NCCL_NET, "host buffers: coded by the resident GPU codec where NCCL's buffers are "
             "mapped for the GPU (NCCL_ZIP_GPU=%lld), else by the CPU", (long long)gpu_enabled());
  else
    ZIP_INFO(NCCL_INIT | NCCL_NET, "host buffers: coded by the CPU (%s)", resident_why);
  p.gpu_codec = gpu_codec_usable(&why);
  p.gdr = decide_gdr(t, p.gpu_codec);
  if (p.gpu_codec)
    ZIP_INFO(NCCL_INIT | NCCL_NET, "device buffers: ptrSupport HOST|CUDA, staged through pinned memory, "
             "coded by the GPU codec (NCCL_ZIP_GPU=2, experimental: can deadlock when the application "
             "blocks in CUDA while a collective runs)");
  else if (p.gdr)
    ZIP_INFO(NCCL_INIT | NCCL_NET, "device buffers: GPUDirect RDMA, sent raw (compression applies to what NCCL "
             "stages through host memory; NCCL_ZIP_GDR=0 stages everything there)");
  else
    ZIP_INFO(NCCL_INIT | NCCL_NET, "device buffers: ptrSupport HOST only (%s); NCCL stages through host memory", why);
  return p;
}

ncclResult_t register_buffer(Comm* c, const DeviceInfo& dev, const DevicePath& path, void* data, size_t size,
                             bool announced_device, int dmabuf_fd, uint64_t offset, Mr** out) {
  *out = nullptr;
  const MemInfo info = memory_info(data);
  const MemKind kind = info.kind;
  const int device = info.device;
  if (announced_device && kind != MemKind::kDevice) {
    ZIP_WARN("regMr: %p (%zu bytes) announced as device memory, but CUDA does not know it as such", data, size);
    return ncclInvalidUsage;
  }
  const bool direct = kind == MemKind::kDevice && path.gdr;
  if (kind == MemKind::kDevice && !direct) {
    std::lock_guard<std::mutex> g(c->mutex());  // the progress thread may be polling this comm
    if (!path.gpu_codec || !c->use_device(device)) {
      ZIP_WARN("regMr: %p (%zu bytes) is memory of GPU %d, which this plugin cannot move%s", data, size, device,
               path.gpu_codec ? " (no GPU codec engine)" : " (ptrSupport HOST)");
      return ncclInvalidUsage;
    }
  }
  bool gpu_mapped = false;
  if (kind == MemKind::kHost && path.resident) {
    std::lock_guard<std::mutex> g(c->mutex());
    if (info.gpu_mapped)
      gpu_mapped = c->use_resident();
    else
      c->note_unmapped(data, size, info.cuda_type);
  }
  const bool flag_polled = c->kind() == Comm::kRecv &&
                           (int64_t(size) == ll_buffsize() || int64_t(size) == ll128_buffsize());
  char* mirror = nullptr;
  if (kind == MemKind::kDevice && !direct && size > 0) {  // NCCL's service thread: allocating here is safe
    mirror = alloc_pinned(size);
    if (!mirror) return ncclSystemError;  // alloc_pinned logged why
  }
  const bool flushed = direct && c->kind() == Comm::kRecv && dev.gdr_flush;
  std::unique_ptr<Mr> mr(
      new Mr{static_cast<char*>(data), size, kind, gpu_mapped, flag_polled, mirror, direct, flushed, nullptr});
  // RDMA keys, for transports that need them, of what goes on the wire.
  const ncclResult_t r = direct ? c->link().reg_device_mem(data, size, dmabuf_fd, offset, flushed, &mr->reg)
                                : c->link().reg_mem(mirror ? mirror : data, size, &mr->reg);
  if (r != ncclSuccess) {
    if (mirror) free_pinned(mirror);
    return r;
  }
  ZIP_TRACE("regMr %p %zu bytes, %s%s", data, size,
            !direct ? (kind == MemKind::kDevice ? "device"
                       : gpu_mapped             ? "host, mapped for the GPU codec"
                       : info.gpu_mapped        ? "host, mapped (GPU codec off)"
                                                : "host, not mapped for the GPU: CPU codec")
            : dmabuf_fd >= 0 ? "device, GPUDirect (dmabuf)"
                             : "device, GPUDirect",
            flag_polled ? " (LL/LL128 buffer: never compressed)" : "");
  *out = mr.release();
  return ncclSuccess;
}

void deregister_buffer(Mr* mr) {
  if (!mr) return;
  mr->reg.reset();  // the transport's registration of the mirror goes before its memory
  if (mr->mirror) free_pinned(mr->mirror);
  delete mr;
}

}  // namespace zipccl
