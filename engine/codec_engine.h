// The engine's view of a codec: asynchronous jobs that compress a message into a staging buffer
// or decompress one into NCCL's buffer. submit() never blocks; completion is observed by polling
// job->done() from NCCL's progress thread. The CPU engine runs jobs on helper threads; the
// resident GPU codec's engine (resident_engine.h) posts them to a persistent kernel and completes
// them from poll() by reading their results in mapped memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mem_kind.h"
#include "zipccl/codec.h"
#include "zipccl/service_protocol.h"

namespace zipccl {

// One message to code: an encode from NCCL's buffer into staging, or a decode from staging into
// NCCL's buffer.
struct CodecJob {
  enum Op : uint8_t { kEncode, kDecode };
  // Inputs.
  Op op = kEncode;
  const void* src = nullptr;
  size_t src_bytes = 0;
  void* dst = nullptr;
  size_t dst_cap = 0;
  bool checksum = false;    // encode: store a CRC32C of the input
  double max_ratio = 1.0;   // encode: emit a raw-format message when coding saves less
  bool gpu_ok = false;      // src and dst are memory the resident GPU codec may use
  bool gpu_only = false;    // and no other engine may (device memory): an encode the GPU does not
                            // take is skipped, a decode waits for it
  // Outputs, valid once done().
  zipccl::Status status = zipccl::Status::kOk;
  zipccl::Codec codec = zipccl::Codec::Raw;  // encode: the codec of the message emitted
  size_t out_bytes = 0;
  double seconds = 0;
  bool on_gpu = false;  // coded by the resident GPU codec
  gpu::JobTimes gpu_times{};  // on_gpu: where its time went, on the GPU's clock
  bool skipped = false;  // encode not attempted (no GPU at hand, the CPU not wanted): send raw

  bool done() const { return state.load(std::memory_order_acquire) == kDone; }
  // Asks the engine to skip a job it has not started (connection teardown); the job still
  // reaches done(), with status kNoSpace.
  void cancel() { cancelled.store(true, std::memory_order_release); }

  enum State : int { kIdle, kQueued, kDone };
  std::atomic<int> state{kIdle};
  std::atomic<bool> cancelled{false};
  CodecJob* next = nullptr;  // engine-private queue link
};

class CodecEngine {
 public:
  virtual ~CodecEngine() = default;
  virtual const char* name() const = 0;
  // Queues the job. The caller keeps the job and its buffers alive until job->done().
  virtual void submit(CodecJob* job) = 0;
  // Completes jobs that need the caller's thread to notice them (GPU events). Non-blocking.
  virtual void poll() = 0;
  // Sustained input throughput in bytes/s over recent jobs of this kind, all workers together;
  // 0 while unmeasured.
  virtual double throughput(CodecJob::Op op) const = 0;
  // Whether throughput() rests on enough jobs to trust a low value: a first sample alone (one
  // job, perhaps on a kernel just started) does not, and auto mode measures such a codec again
  // before it gives up on it.
  virtual bool throughput_settled(CodecJob::Op op) const {
    (void)op;
    return true;
  }
  // How long the engine needs for the jobs it has taken and not finished, at its throughput():
  // what a job submitted now waits for where they run in order. 0 where it does not say.
  virtual double queued_seconds() const { return 0; }
  // A receiver's promise that a message will be decoded where it is fast: true keeps the engine
  // ready for decodes until unlease() (the resident GPU codec: its kernel stays); false, the
  // engine would fall back to a slower coder now (the caller may ask for raw bytes instead).
  virtual bool lease() { return true; }
  virtual void unlease() {}
};

// What an engine sustains for a rank's traffic in a collective: encoding what it sends and
// decoding what it receives, the same bytes each way, at once: 1 / (1/encode + 1/decode). The
// encode rate alone while no decode has been measured; 0 while no encode has.
inline double coding_rate(const CodecEngine& e) {
  const double enc = e.throughput(CodecJob::kEncode), dec = e.throughput(CodecJob::kDecode);
  return enc > 0 && dec > 0 ? 1 / (1 / enc + 1 / dec) : enc;
}
// coding_rate() rests on settled throughputs (every one it uses).
inline bool coding_rate_settled(const CodecEngine& e) {
  return e.throughput_settled(CodecJob::kEncode) &&
         (e.throughput(CodecJob::kDecode) == 0 || e.throughput_settled(CodecJob::kDecode));
}

// The process-wide CPU engine, NCCL_ZIP_CPU_THREADS workers. acquire() starts it with the first
// connection, release() stops it (joining its threads) with the last.
CodecEngine* acquire_cpu_codec();
void release_cpu_codec();

}  // namespace zipccl
