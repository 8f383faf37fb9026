#include "comm.h"

#include <chrono>

#include "log.h"
#include "engine_params.h"

namespace zipccl {

void StagingPool::allocate(Buf* b, size_t bytes) {
  b->reg.reset();
  b->p.reset(new char[bytes]);
  b->cap = bytes;
  // Without a registration a transfer registers the buffer itself: slower, still correct.
  if (conn_->reg_mem(b->p.get(), bytes, &b->reg) != ncclSuccess) b->reg.reset();
}

StagingPool::Buf StagingPool::take(size_t bytes) {
  // Best fit among the free buffers; else grow the largest one (or make a new one).
  int best = -1;
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].cap >= bytes && (best < 0 || free_[i].cap < free_[size_t(best)].cap)) best = int(i);
  if (best < 0 && !free_.empty()) {
    best = 0;
    for (size_t i = 1; i < free_.size(); ++i)
      if (free_[i].cap > free_[size_t(best)].cap) best = int(i);
    held_ -= free_[size_t(best)].cap;
    allocate(&free_[size_t(best)], bytes);
    held_ += bytes;
  }
  if (best < 0) {
    held_ += bytes;
    Buf b;
    allocate(&b, bytes);
    return b;
  }
  Buf b = std::move(free_[size_t(best)]);
  free_.erase(free_.begin() + best);
  return b;
}

void StagingPool::give(Buf b) {
  if (b.p) free_.push_back(std::move(b));
}

Comm::Comm(Kind kind, int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn)
    : kind_(kind),
      dev_(dev),
      ctx_(std::move(ctx)),
      conn_(std::move(conn)),
      cpu_codec_(acquire_cpu_codec()),
      staging_(conn_.get()),
      stall_warn_ms_(stall_warn_s() * 1000) {}

int64_t Comm::now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

void Comm::log_stall(const std::string& state) {
  ZIP_WARN("%s comm %s %s: request not done after %lld s (NCCL_ZIP_STALL_WARN_S): %s",
           kind_ == kSend ? "send" : "recv", kind_ == kSend ? "to" : "from", conn_->peer().c_str(),
           (long long)(stall_warn_ms_ / 1000), state.c_str());
}

Comm::~Comm() {
  if (gpu_codec_) release_gpu_codec(gpu_device_);
  release_cpu_codec();
}

bool Comm::use_device(int device) {
  if (gpu_codec_) {
    if (device == gpu_device_) return true;
    ZIP_WARN("regMr: device memory of GPU %d on a connection that uses GPU %d", device, gpu_device_);
    return false;
  }
  gpu_codec_ = acquire_gpu_codec(device);
  if (!gpu_codec_) return false;
  gpu_device_ = device;
  return true;
}

void Comm::log_summary() {
  ctx_->totals.add(stats_);
  ZIP_INFO(NCCL_NET, "%s comm %s %s closed: %s, staging %.1f MB%s", kind_ == kSend ? "send" : "recv",
           kind_ == kSend ? "to" : "from", conn_->peer().c_str(), stats_.summary().c_str(),
           double(staging_.held_bytes()) / 1e6, gpu_codec_ ? ", device buffers via the GPU codec" : "");
}

ncclResult_t Comm::fail(ncclResult_t code, const std::string& why) {
  if (failed_ == ncclSuccess) {
    failed_ = code;
    ZIP_WARN("%s comm %s %s failed: %s", kind_ == kSend ? "send" : "recv", kind_ == kSend ? "to" : "from",
             conn_->peer().c_str(), why.c_str());
  }
  return failed_;
}

ncclResult_t Comm::check_conn() {
  if (failed_ != ncclSuccess) return failed_;
  ncclResult_t s = conn_->error();
  if (s != ncclSuccess) return fail(s, conn_->error_text());
  return ncclSuccess;
}

}  // namespace zipccl
