#include "comm.h"

#include <chrono>
#include <thread>

#include "engine_params.h"
#include "log.h"
#include "resident_gpus.h"

namespace zipccl {

Comm::Comm(Kind kind, int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Link> link)
    : kind_(kind),
      dev_(dev),
      ctx_(std::move(ctx)),
      link_(std::move(link)),
      cpu_codec_(acquire_cpu_codec()),
      staging_(link_.get()),
      device_staging_(link_.get()),
      timeline_(Timeline::create(kind == kSend, link_->peer())),
      stall_warn_ms_(stall_warn_s() * 1000),
      cold_wait_(gpu_wait_us() * 1000) {}

void Comm::log_stall(const std::string& state) {
  ZIP_WARN("%s comm %s %s: request not done after %lld s (NCCL_ZIP_STALL_WARN_S): %s",
           kind_ == kSend ? "send" : "recv", kind_ == kSend ? "to" : "from", link_->peer().c_str(),
           (long long)(stall_warn_ms_ / 1000), state.c_str());
}

Comm::~Comm() {
  if (resident_) release_resident(resident_device_, cold_wait_.waits(), cold_wait_.vain());
  release_cpu_codec();
}

bool Comm::wait_for_kernel(CodecEngine* engine) {
  if (!engine || engine != resident_ || zip_mode() != ZipMode::kAuto || gpu_wait_us() == 0) return false;
  const bool running = engine->lease();
  if (running) engine->unlease();
  return cold_wait_.wait(running, now_ns());
}

std::string Comm::kernel_waits() const {
  if (cold_wait_.waits() == 0) return "";
  return ", waited for a cold kernel " + std::to_string(cold_wait_.waits()) + " times (" +
         std::to_string(cold_wait_.vain()) + " in vain)";
}

void Comm::cancel_and_wait(CodecJob* job) {
  job->cancel();
  while (!job->done()) {
    poll_engines();
    std::this_thread::yield();
  }
}

bool Comm::use_resident() {
  if (resident_ || resident_failed_) return resident_ != nullptr;
  const int device = resident_device();
  ResidentGpu* g = device >= 0 ? acquire_resident(device) : nullptr;
  if (!g) {
    resident_failed_ = true;
    if (device < 0) ZIP_WARN("%s comm: no CUDA device on this thread; host buffers are coded on the CPU",
                             kind_ == kSend ? "send" : "recv");
    return false;
  }
  resident_ = g->engine.get();
  resident_device_ = device;
  staging_.set_arena(g->arena);
  resident_gpu_ = g;
  ZIP_INFO(NCCL_NET, "%s comm %s %s: host buffers coded by the resident GPU codec of GPU %d while it runs, "
           "by the CPU otherwise", kind_ == kSend ? "send" : "recv", kind_ == kSend ? "to" : "from",
           link_->peer().c_str(), device);
  return true;
}

bool Comm::use_resident_device(const DeviceInfo& dev) {
  if (device_staging_.device()) return true;
  if (device_tried_) return false;  // and failed (logged)
  device_tried_ = true;
  const char* side = kind_ == kSend ? "send comm to" : "recv comm from";
  if (!use_resident()) return false;
  const StagingArena* arena = resident_gpu_->device_arena.get();
  if (!arena) {
    ZIP_INFO(NCCL_NET, "%s %s: device buffers sent raw (no device staging)", side, link_->peer().c_str());
    return false;
  }
  // By pointer where nvidia-peermem pins device memory, else as the DMA-BUF.
  const int fd = dev.gdr_peermem ? -1 : resident_gpu_->device_arena_fd;
  if (!dev.gdr_peermem && fd < 0) {
    ZIP_INFO(NCCL_NET, "%s %s: device buffers sent raw (%s has no nvidia-peermem and the device staging no "
             "DMA-BUF)", side, link_->peer().c_str(), dev.name.c_str());
    return false;
  }
  std::unique_ptr<MemReg> reg;
  const bool flushed = kind_ == kRecv && dev.gdr_flush;
  if (link_->reg_device_mem(arena->base(), arena->size(), fd, 0, flushed, &reg) != ncclSuccess) {
    ZIP_WARN("%s %s: registering the device staging with %s failed; device buffers are sent raw", side,
             link_->peer().c_str(), dev.name.c_str());
    return false;
  }
  device_staging_.set_device_arena(resident_gpu_->device_arena, std::move(reg));
  flush_staging_ = flushed;
  ZIP_INFO(NCCL_NET, "%s %s: device buffers coded by the resident GPU codec of GPU %d while it runs, raw "
           "otherwise (%zu MiB device staging%s)", side, link_->peer().c_str(), resident_device_,
           arena->size() >> 20, fd >= 0 ? ", DMA-BUF" : "");
  return true;
}

void Comm::note_unmapped(const void* data, size_t size, int cuda_type) {
  if (unmapped_logged_) return;
  unmapped_logged_ = true;
  ZIP_INFO(NCCL_NET, "%s comm %s %s: host buffer %p (%zu bytes) is not mapped for the GPU "
           "(cudaPointerGetAttributes type %d): the CPU codes its messages",
           kind_ == kSend ? "send" : "recv", kind_ == kSend ? "to" : "from", link_->peer().c_str(), data, size,
           cuda_type);
}

std::string Comm::codec_rate(CodecJob::Op op) const {
  const CodecEngine* e = resident_ ? resident_ : cpu_codec_;
  const double bps = e->throughput(op);
  if (bps <= 0) return "";
  char buf[96];
  snprintf(buf, sizeof buf, ", %s %s %.2f GB/s", e->name(), op == CodecJob::kEncode ? "encode" : "decode", bps / 1e9);
  return buf;
}

void Comm::log_summary() {
  ctx_->totals.add(stats_);
  ZIP_INFO(NCCL_NET, "%s comm %s %s closed: %s, staging %.1f MB%s", kind_ == kSend ? "send" : "recv",
           kind_ == kSend ? "to" : "from", link_->peer().c_str(), stats_.summary().c_str(),
           double(staging_.held_bytes()) / 1e6, details().c_str());
}

ncclResult_t Comm::fail(ncclResult_t code, const std::string& why) {
  if (failed_ == ncclSuccess) {
    failed_ = code;
    ZIP_WARN("%s comm %s %s failed: %s", kind_ == kSend ? "send" : "recv", kind_ == kSend ? "to" : "from",
             link_->peer().c_str(), why.c_str());
  }
  return failed_;
}

ncclResult_t Comm::check_link() {
  if (failed_ != ncclSuccess) return failed_;
  const ncclResult_t r = link_->error();
  if (r != ncclSuccess) return fail(r, link_->error_text());
  return ncclSuccess;
}

}  // namespace zipccl
