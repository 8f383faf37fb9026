// GPU codec engine: device buffers coded by zipccl_gpu_codec. submit() only queues; poll() launches
// everything queued as one batch on the engine's own non-blocking, highest-priority stream (so our
// kernels are not queued behind the training step's), and completes batches by cudaEventQuery.
// Per batch, in stream order:
//   encode kernels (device input -> device scratch)           -> event enc_end
//   H2D copies (pinned message -> device scratch), decodes    -> event dec_end
//   plain copies (raw device messages to or from pinned host) -> event end
// and once `end` has completed, the encodes' results are known: the compressed bytes (or, when
// coding did not pay, the input) are copied to the job's pinned host buffer -> event out_end.
// Batches complete in stream order, so the device scratch is a ring freed from its tail.
// One engine per CUDA device, shared by the process (gpu_engines.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <string>

#include "codec_engine.h"
#include "zipccl/gpu_codec.h"

namespace zipccl {

class GpuCodecEngine final : public CodecEngine {
 public:
  explicit GpuCodecEngine(int device) : device_(device) {}
  ~GpuCodecEngine() override;
  bool init(std::string* err);

  const char* name() const override { return "gpu"; }
  void submit(CodecJob* job) override;
  void poll() override;
  double throughput(CodecJob::Op op) const override { return bps_[op].load(std::memory_order_relaxed); }
  size_t max_message_bytes() const override { return scratch_cap_ - kAlign; }
  size_t scratch_bytes() const { return scratch_cap_; }

 private:
  static constexpr int kSlots = 16;       // batches in flight
  static constexpr size_t kAlign = 256;   // device scratch alignment
  static size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
  struct Slot {
    enum State { kFree, kRunning, kCopyingOut, kDone } state = kFree;
    cudaEvent_t start = nullptr, enc_end = nullptr, dec_end = nullptr, end = nullptr, out_end = nullptr;
    zipccl::gpu::Result* res = nullptr;  // kMaxBatch, pinned: encodes first, then decodes
    CodecJob* jobs[zipccl::gpu::kMaxBatch];
    char* scratch[zipccl::gpu::kMaxBatch];  // device scratch per job (encode output, decode input)
    int res_index[zipccl::gpu::kMaxBatch];
    int n = 0, n_enc = 0, n_dec = 0;
    size_t ring_end = 0, ring_held = 0;
    cudaError_t error = cudaSuccess;  // an enqueue failed: the batch completes as failed
  };

  bool ring_alloc(size_t n, size_t* off);
  void launch_locked();
  void enqueue(Slot& b);
  void complete_locked();
  void on_kernels_done(Slot& b);
  void finish(Slot& b, bool ok);
  void fail_job(CodecJob* j);
  void record_rate(CodecJob::Op op, double bytes, double ms);
  void warn(const char* what, cudaError_t e);

  const int device_;
  std::mutex mu_;
  std::deque<CodecJob*> queue_;
  cudaStream_t stream_ = nullptr;
  char* scratch_ = nullptr;
  size_t scratch_cap_ = 0;
  size_t head_ = 0, tail_ = 0, used_ = 0;  // device scratch ring
  void* temp_ = nullptr;
  size_t temp_bytes_ = 0;
  zipccl::gpu::Result* results_ = nullptr;
  Slot slots_[kSlots];
  unsigned next_ = 0, oldest_ = 0, live_ = 0;  // slot ring
  bool broken_ = false;  // a CUDA error: every later job fails (the context may be unusable)
  std::atomic<double> bps_[3] = {0.0, 0.0, 0.0};
};

}  // namespace zipccl
