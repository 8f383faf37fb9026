#include "gpu_codec_engine.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "cuda_scope.h"
#include "engine_params.h"
#include "log.h"
#include "zipccl/format.h"

namespace zipccl {
namespace {

namespace gpu = zipccl::gpu;

// One launch's temp covers this many times the scratch in bytes (encode inputs and decode
// outputs: a batch's encode inputs fit the scratch, its decode outputs are at most a few times
// their messages; a larger batch is split where temp runs out).
constexpr size_t kTempCoverScratch = 4;

}  // namespace

#define ZIP_CUDA_INIT(call)                                                  \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    if (e_ != cudaSuccess) {                                                 \
      *err = std::string(#call) + ": " + cudaGetErrorString(e_);             \
      return false;                                                          \
    }                                                                        \
  } while (0)

bool GpuCodecEngine::init(std::string* err) {
  CudaScope scope(device_);
  int least = 0, greatest = 0;
  ZIP_CUDA_INIT(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  ZIP_CUDA_INIT(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
  scratch_cap_ = size_t(gpu_staging_mb()) << 20;
  ZIP_CUDA_INIT(cudaMalloc(reinterpret_cast<void**>(&scratch_), scratch_cap_));
  temp_bytes_ = gpu::temp_bytes_bound(kTempCoverScratch * scratch_cap_, gpu::kMaxBatch);
  ZIP_CUDA_INIT(cudaMalloc(&temp_, temp_bytes_));
  ZIP_CUDA_INIT(gpu::init_temp(temp_, temp_bytes_, stream_));
  ZIP_CUDA_INIT(cudaHostAlloc(reinterpret_cast<void**>(&results_), sizeof(gpu::Result) * gpu::kMaxBatch * kSlots,
                              cudaHostAllocPortable));
  for (int i = 0; i < kSlots; ++i) {
    Slot& b = slots_[i];
    b.res = results_ + size_t(i) * gpu::kMaxBatch;
    for (cudaEvent_t* ev : {&b.start, &b.enc_end, &b.dec_end, &b.end, &b.out_end}) ZIP_CUDA_INIT(cudaEventCreate(ev));
  }
  ZIP_INFO(NCCL_INIT | NCCL_NET,
           "GPU codec engine on device %d: stream priority %d, device scratch %.1f MB "
           "(NCCL_ZIP_GPU_STAGING_MB), temp %.1f MB",
           device_, greatest, double(scratch_cap_) / 1e6, double(temp_bytes_) / 1e6);
  return true;
}

GpuCodecEngine::~GpuCodecEngine() {
  // Comms wait for their jobs before they go, so the stream is idle; the synchronize is for
  // whatever a failed batch may have left running (close path, not the progress thread).
  CudaScope scope(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (Slot& b : slots_)
    for (cudaEvent_t ev : {b.start, b.enc_end, b.dec_end, b.end, b.out_end})
      if (ev) cudaEventDestroy(ev);
  if (results_) cudaFreeHost(results_);
  if (temp_) cudaFree(temp_);
  if (scratch_) cudaFree(scratch_);
  if (stream_) cudaStreamDestroy(stream_);
}

void GpuCodecEngine::warn(const char* what, cudaError_t e) {
  ZIP_WARN("GPU codec engine (device %d): %s failed: %s", device_, what, cudaGetErrorString(e));
  broken_ = true;
}

void GpuCodecEngine::fail_job(CodecJob* j) {
  j->failed = true;
  j->status = zipccl::Status::kNoSpace;
  j->state.store(CodecJob::kDone, std::memory_order_release);
}

void GpuCodecEngine::submit(CodecJob* job) {
  job->state.store(CodecJob::kQueued, std::memory_order_relaxed);
  job->failed = false;
  std::lock_guard<std::mutex> g(mu_);
  queue_.push_back(job);
}

void GpuCodecEngine::poll() {
  std::lock_guard<std::mutex> g(mu_);
  if (queue_.empty() && live_ == 0) return;
  CudaScope scope(device_);
  complete_locked();
  launch_locked();
}

bool GpuCodecEngine::ring_alloc(size_t n, size_t* off) {
  if (used_ == 0) head_ = tail_ = 0;
  if (head_ >= tail_ && used_ < scratch_cap_) {  // free: [head_, cap) and [0, tail_)
    if (scratch_cap_ - head_ >= n) {
      *off = head_;
    } else if (tail_ >= n) {  // skip the end
      used_ += scratch_cap_ - head_;
      *off = 0;
    } else {
      return false;
    }
  } else if (tail_ - head_ >= n && used_ < scratch_cap_) {  // free: [head_, tail_)
    *off = head_;
  } else {
    return false;
  }
  head_ = *off + n;
  used_ += n;
  return true;
}

void GpuCodecEngine::launch_locked() {
  while (!queue_.empty()) {
    if (broken_) {
      fail_job(queue_.front());
      queue_.pop_front();
      continue;
    }
    Slot& b = slots_[next_ % kSlots];
    if (b.state != Slot::kFree) return;  // kSlots batches in flight: poll() launches later
    size_t enc_sizes[gpu::kMaxBatch], dec_sizes[gpu::kMaxBatch];
    b.n = b.n_enc = b.n_dec = 0;
    b.error = cudaSuccess;
    const size_t used_before = used_;
    while (!queue_.empty() && b.n < gpu::kMaxBatch) {
      CodecJob* j = queue_.front();
      if (j->cancelled.load(std::memory_order_acquire)) {
        queue_.pop_front();
        j->status = zipccl::Status::kNoSpace;
        j->state.store(CodecJob::kDone, std::memory_order_release);
        continue;
      }
      const bool enc = j->op == CodecJob::kEncode, dec = j->op == CodecJob::kDecode;
      if (enc) enc_sizes[b.n_enc] = j->src_bytes;
      if (dec) dec_sizes[b.n_dec] = j->dst_cap;
      const size_t temp_need = enc ? gpu::temp_bytes(enc_sizes, b.n_enc + 1) : dec ? gpu::temp_bytes(dec_sizes, b.n_dec + 1) : 0;
      const size_t need = enc ? align_up(zipccl::max_compressed_bytes(j->src_bytes)) : dec ? align_up(j->src_bytes) : 0;
      size_t off = 0;
      if (temp_need > temp_bytes_ || (need > 0 && !ring_alloc(need, &off))) {
        if (b.n > 0 || live_ > 0) break;  // fits once earlier work completes
        // Alone on an idle engine and still too big: the comms keep jobs within
        // max_message_bytes(), so this is a bug; fail it rather than wait forever.
        ZIP_WARN("GPU codec engine: job of %zu bytes does not fit the device scratch (%zu bytes)", j->src_bytes,
                 scratch_cap_);
        queue_.pop_front();
        fail_job(j);
        continue;
      }
      queue_.pop_front();
      b.scratch[b.n] = need > 0 ? scratch_ + off : nullptr;
      b.res_index[b.n] = enc ? b.n_enc++ : dec ? b.n_dec++ : -1;
      b.jobs[b.n++] = j;
    }
    if (b.n == 0) return;
    b.ring_end = head_;
    b.ring_held = used_ - used_before;
    b.state = Slot::kRunning;
    ++next_;
    ++live_;
    enqueue(b);
  }
}

void GpuCodecEngine::enqueue(Slot& b) {
  gpu::EncodeItem enc[gpu::kMaxBatch];
  gpu::DecodeItem dec[gpu::kMaxBatch];
  gpu::EncodeOptions opt;
  opt.raw_header_only = true;  // a message that does not pay is copied from the input itself
  for (int i = 0; i < b.n; ++i) {
    CodecJob* j = b.jobs[i];
    if (j->op == CodecJob::kEncode) {
      gpu::EncodeItem& it = enc[b.res_index[i]];
      it.in = j->src;
      it.bytes = j->src_bytes;
      it.out = b.scratch[i];
      it.out_cap = zipccl::max_compressed_bytes(j->src_bytes);
      it.auto_codec = true;
      opt.checksum = j->checksum;  // process-wide settings: equal for every job
      opt.max_ratio = j->max_ratio;
    } else if (j->op == CodecJob::kDecode) {
      gpu::DecodeItem& it = dec[b.res_index[i]];
      it.in = b.scratch[i];
      it.in_bytes = j->src_bytes;
      it.out = j->dst;
      it.out_cap = j->dst_cap;
    }
  }
  std::memset(b.res, 0, sizeof(gpu::Result) * gpu::kMaxBatch);  // this slot's last batch is complete
  gpu::Result* dec_res = b.res + b.n_enc;
  // The codec checks its launches with cudaGetLastError: clear what an earlier call of ours may
  // have left there (an event query's cudaErrorNotReady), so it is not taken for a launch failure.
  cudaGetLastError();
  cudaError_t e = cudaEventRecord(b.start, stream_);
  if (e == cudaSuccess && b.n_enc > 0) e = gpu::encode_batch(enc, b.n_enc, temp_, temp_bytes_, b.res, stream_, opt);
  if (e == cudaSuccess) e = cudaEventRecord(b.enc_end, stream_);
  for (int i = 0; i < b.n && e == cudaSuccess; ++i)
    if (b.jobs[i]->op == CodecJob::kDecode)
      e = cudaMemcpyAsync(b.scratch[i], b.jobs[i]->src, b.jobs[i]->src_bytes, cudaMemcpyHostToDevice, stream_);
  if (e == cudaSuccess && b.n_dec > 0) e = gpu::decode_batch(dec, b.n_dec, temp_, temp_bytes_, dec_res, stream_);
  if (e == cudaSuccess) e = cudaEventRecord(b.dec_end, stream_);
  for (int i = 0; i < b.n && e == cudaSuccess; ++i)
    if (b.jobs[i]->op == CodecJob::kCopy)
      e = cudaMemcpyAsync(b.jobs[i]->dst, b.jobs[i]->src, b.jobs[i]->src_bytes, cudaMemcpyDefault, stream_);
  if (e != cudaSuccess) {
    warn("launching a batch", e);
    b.error = e;
  }
  // Whatever was enqueued may still run: the batch completes (as failed) only after it.
  const cudaError_t r = cudaEventRecord(b.end, stream_);
  if (r != cudaSuccess) {
    if (b.error == cudaSuccess) warn("cudaEventRecord", r);
    b.error = r;
    for (int i = 0; i < b.n; ++i) fail_job(b.jobs[i]);
    b.n = 0;
    b.state = Slot::kDone;  // retired in order by complete_locked()
  }
}

void GpuCodecEngine::record_rate(CodecJob::Op op, double bytes, double ms) {
  // Uncompressed bytes per second of batches big enough to time well, a moving average.
  if (bytes < 64 * 1024 || ms <= 0) return;
  const double v = bytes / (ms * 1e-3);
  const double old = bps_[op].load(std::memory_order_relaxed);
  bps_[op].store(old == 0 ? v : 0.8 * old + 0.2 * v, std::memory_order_relaxed);
}

void GpuCodecEngine::on_kernels_done(Slot& b) {
  float enc_ms = 0, dec_ms = 0;
  if (cudaEventElapsedTime(&enc_ms, b.start, b.enc_end) != cudaSuccess) enc_ms = 0;
  if (cudaEventElapsedTime(&dec_ms, b.enc_end, b.dec_end) != cudaSuccess) dec_ms = 0;
  double enc_bytes = 0, dec_bytes = 0;
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < b.n; ++i) {
    CodecJob* j = b.jobs[i];
    if (j->op == CodecJob::kCopy) {
      j->status = zipccl::Status::kOk;
      j->out_bytes = j->src_bytes;
      b.jobs[i] = nullptr;  // done: its comm may free it at once
      j->state.store(CodecJob::kDone, std::memory_order_release);
      continue;
    }
    const gpu::Result& r = b.res[j->op == CodecJob::kDecode ? b.n_enc + b.res_index[i] : b.res_index[i]];
    if (j->op == CodecJob::kDecode) {
      if (!r.done) {  // the codec always publishes a result; without one nothing is trusted
        ZIP_WARN("GPU codec engine (device %d): a decode left no result", device_);
        b.jobs[i] = nullptr;
        fail_job(j);
        continue;
      }
      j->status = static_cast<zipccl::Status>(r.status);
      j->out_bytes = r.bytes;
      j->codec = static_cast<zipccl::Codec>(r.codec);
      j->seconds = dec_ms * 1e-3 / b.n_dec;
      dec_bytes += double(r.bytes);
      b.jobs[i] = nullptr;
      j->state.store(CodecJob::kDone, std::memory_order_release);
      continue;
    }
    // Encode: the compressed message if coding paid, else the input itself, to the pinned buffer.
    const bool coded = r.done && r.status == int32_t(zipccl::Status::kOk) && !r.raw_from_input &&
                       r.codec != uint8_t(zipccl::Codec::Raw) && r.bytes <= j->dst_cap;
    j->status = zipccl::Status::kOk;
    j->codec = coded ? static_cast<zipccl::Codec>(r.codec) : zipccl::Codec::Raw;
    j->out_bytes = coded ? size_t(r.bytes) : j->src_bytes;
    j->seconds = enc_ms * 1e-3 / b.n_enc;
    enc_bytes += double(j->src_bytes);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(j->dst, coded ? b.scratch[i] : j->src, j->out_bytes, cudaMemcpyDeviceToHost, stream_);
  }
  record_rate(CodecJob::kEncode, enc_bytes, enc_ms);
  record_rate(CodecJob::kDecode, dec_bytes, dec_ms);
  if (b.n_enc == 0) {
    b.state = Slot::kDone;
    return;
  }
  if (e == cudaSuccess) e = cudaEventRecord(b.out_end, stream_);
  if (e != cudaSuccess) {
    warn("copying compressed messages to the host", e);
    finish(b, false);
    b.state = Slot::kDone;
    return;
  }
  b.state = Slot::kCopyingOut;
}

// Completes the batch's jobs not done yet (only encodes remain once the kernels are done: ok
// means their copies are complete), or fails them.
void GpuCodecEngine::finish(Slot& b, bool ok) {
  for (int i = 0; i < b.n; ++i) {
    CodecJob* j = b.jobs[i];
    if (!j) continue;  // done already
    if (ok) j->state.store(CodecJob::kDone, std::memory_order_release);
    else fail_job(j);
  }
}

void GpuCodecEngine::complete_locked() {
  for (unsigned k = oldest_; k != next_; ++k) {
    Slot& b = slots_[k % kSlots];
    if (b.state == Slot::kRunning) {
      const cudaError_t e = cudaEventQuery(b.end);
      if (e == cudaErrorNotReady) break;  // later batches run after this one
      if (e != cudaSuccess || b.error != cudaSuccess) {
        if (e != cudaSuccess) warn("a batch", e);
        finish(b, false);
        b.state = Slot::kDone;
      } else {
        on_kernels_done(b);
      }
    }
    if (b.state == Slot::kCopyingOut) {
      const cudaError_t e = cudaEventQuery(b.out_end);
      if (e == cudaErrorNotReady) continue;  // later batches' kernels may be done already
      if (e != cudaSuccess) warn("copying compressed messages to the host", e);
      finish(b, e == cudaSuccess);
      b.state = Slot::kDone;
    }
  }
  // Retire finished batches in order: the scratch ring is freed from its tail.
  while (live_ > 0 && slots_[oldest_ % kSlots].state == Slot::kDone) {
    Slot& b = slots_[oldest_ % kSlots];
    tail_ = b.ring_end;
    used_ -= b.ring_held;
    b.state = Slot::kFree;
    ++oldest_;
    --live_;
  }
}

}  // namespace zipccl
