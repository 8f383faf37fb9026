#include "comm.h"

#include "log.h"

namespace zip {

StagingPool::Buf StagingPool::make(size_t bytes) {
  Buf b;
  if (pinned_) b.p = std::unique_ptr<char, void (*)(char*)>(alloc_pinned(bytes), free_pinned);
  else b.p = std::unique_ptr<char, void (*)(char*)>(new char[bytes], free_host);
  if (b.p) {
    b.cap = bytes;
    held_ += bytes;
  }
  return b;
}

StagingPool::Buf StagingPool::take(size_t bytes) {
  // Pinned buffers come in powers of two and are never freed before the comm closes:
  // cudaFreeHost may wait for the whole device, which the progress thread must not.
  if (pinned_) {
    size_t p = size_t(64) << 10;
    while (p < bytes) p <<= 1;
    bytes = p;
  }
  // Best fit among the free buffers; else replace the largest host one (or make a new one).
  int best = -1;
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].cap >= bytes && (best < 0 || free_[i].cap < free_[size_t(best)].cap)) best = int(i);
  if (best < 0 && !free_.empty() && !pinned_) {
    best = 0;
    for (size_t i = 1; i < free_.size(); ++i)
      if (free_[i].cap > free_[size_t(best)].cap) best = int(i);
    held_ -= free_[size_t(best)].cap;
    free_.erase(free_.begin() + best);
    best = -1;
  }
  if (best < 0) return make(bytes);
  Buf b = std::move(free_[size_t(best)]);
  free_.erase(free_.begin() + best);
  return b;
}

void StagingPool::give(Buf b) {
  if (b.p) free_.push_back(std::move(b));
}

Comm::Comm(Kind kind, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn)
    : kind_(kind), ctx_(std::move(ctx)), conn_(std::move(conn)), cpu_codec_(acquire_cpu_codec()) {}

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
  ZIP_INFO(NCCL_NET, "%s comm %s %s closed: %s, staging %.1f MB (pinned %.1f MB)%s",
           kind_ == kSend ? "send" : "recv", kind_ == kSend ? "to" : "from", conn_->peer().c_str(),
           stats_.summary().c_str(), double(staging_.held_bytes()) / 1e6,
           double(pinned_staging_.held_bytes()) / 1e6, gpu_codec_ ? ", device buffers via the GPU codec" : "");
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
  Status s = conn_->error();
  if (!s.ok()) return fail(s.code, conn_->error_text());
  return ncclSuccess;
}

}  // namespace zip
