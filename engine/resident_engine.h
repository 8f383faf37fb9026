// The resident GPU codec as a codec engine: a job whose memory the GPU can address (gpu_ok:
// NCCL's pinned host buffers, pinned staging, device buffers and device staging) goes to the
// resident kernel when a lease is granted and its ring has room; every other job goes to the CPU
// engine (or, an encode, is skipped), so no job ever waits for CUDA. Device memory (gpu_only)
// only the kernel reaches: its encodes are skipped, its decodes (whose receiver holds a lease, so
// the kernel runs) wait for room in the ring.
// submit() and poll() only touch memory (resident_codec.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "codec_engine.h"
#include "resident_codec.h"
#include "windowed_rate.h"

namespace zipccl {

class ResidentEngine final : public CodecEngine {
 public:
  // cpu_encodes: an encode the GPU cannot take goes to the CPU engine; otherwise it is skipped
  // (CodecJob::skipped: sent raw), as a CPU codec slower than the link would not pay. Decodes
  // always fall back to the CPU.
  ResidentEngine(std::shared_ptr<ResidentCodec> gpu, CodecEngine* cpu, bool cpu_encodes)
      : gpu_(std::move(gpu)), cpu_(cpu), cpu_encodes_(cpu_encodes) {}
  ~ResidentEngine() override;  // waits for the jobs the kernel still codes (it finishes them)

  const char* name() const override { return "gpu-resident"; }
  void submit(CodecJob* job) override;
  void poll() override;
  // The kernel's capacity for this kind of job: uncompressed bytes per second of its CTAs' time
  // coding tiles, shared among them (ServiceHost::tile_ns), as the CPU engine's is per thread
  // times threads. Not bytes over the time from post to result, which counts queues and polls and
  // so reads the load offered. 0 until a GPU job has measured it, and the policy then compresses
  // one message at a time.
  double throughput(CodecJob::Op op) const override;
  bool throughput_settled(CodecJob::Op op) const override;
  // The kernel takes its jobs' tiles in the order they were posted (resident.cu), so a job posted
  // now waits for every posted one: their bytes over the kernel's capacity for each kind. And a
  // burst's first job (the first a launch of the kernel takes; it exits between collectives) may
  // take longer than its bytes at the other jobs' own time per byte (start_s_, averaged over
  // bursts): what is left of that since the burst began (burst_left()) is waited for too. At a
  // collective's start NCCL's kernels copy its first chunks to host memory, and their stores
  // starve the kernel's reads over the same PCIe link (docs/benchmarks.md): two ranks on one
  // H100, the first 1 MiB encode took 0.3 ms longer than the next ones, the link idle meanwhile.
  double queued_seconds() const override;
  double start_seconds() const { return start_s_.load(std::memory_order_relaxed); }
  uint64_t bursts() const { return bursts_.load(std::memory_order_relaxed); }  // measured in start_s_
  // A lease of the kernel (ResidentCodec::acquire): it runs and stays until unlease().
  bool lease() override { return gpu_->acquire(); }
  void unlease() override { gpu_->release(); }

  uint64_t gpu_jobs() const { return gpu_jobs_.load(std::memory_order_relaxed); }
  uint64_t cpu_jobs() const { return cpu_jobs_.load(std::memory_order_relaxed); }
  uint64_t skipped_jobs() const { return skipped_jobs_.load(std::memory_order_relaxed); }

 private:
  struct InFlight {
    CodecJob* job;
    uint64_t index;
    int64_t t0_ns;
    uint64_t queued;  // its bytes in queued_: an encode's input, a decode's room for output
    bool first;       // the first of a burst
    bool done = false;  // seen finished by poll(), with r and t
    gpu::Result r{};
    gpu::JobTimes t{};
  };
  static bool fits_gpu(const CodecJob& job);  // memory and size the kernel takes
  bool try_gpu(CodecJob* job);
  void post_waiting();  // posts waiting_ jobs in order while the ring takes them
  void complete(const InFlight& f);
  double burst_left() const;  // start_s_ less the running launch's burst's age; begins it

  std::shared_ptr<ResidentCodec> gpu_;
  CodecEngine* cpu_;
  const bool cpu_encodes_;
  std::mutex mu_;  // comms of several communicators (progress threads) may share the engine
  std::deque<InFlight> inflight_;
  std::mutex waiting_mu_;  // before mu_ where both are held
  std::deque<CodecJob*> waiting_;  // gpu_only decodes the ring had no room for, in order; under waiting_mu_
  std::atomic<size_t> waiting_n_{0};  // waiting_.size(), read without the lock
  static constexpr double kWindowBytes = 4 << 20;
  static constexpr double kStartWeight = 4;  // start_s_ moves 1/4 of the way to each burst's
  static constexpr double kOwnWeight = 16;   // own_spb_ 1/16 of the way to each job's
  WindowedRate rate_[2] = {{kWindowBytes, true}, {kWindowBytes, true}};  // encode, decode; under mu_
  uint64_t tile_ns_seen_[2] = {0, 0};  // ResidentCodec::tile_ns at the last sample; under mu_
  std::atomic<uint64_t> queued_[2] = {0, 0};  // bytes of the jobs in inflight_, as rate_ counts them
  uint32_t measured_launch_ = 0;  // the launch whose first job was measured; under mu_
  mutable std::mutex burst_mu_;   // begins a launch's burst once
  mutable std::atomic<uint32_t> burst_launch_{0};  // the launch whose burst has begun,
  mutable std::atomic<int64_t> burst_ns_{0};       // and when
  double own_spb_[2] = {0, 0};  // a job's own seconds (first tile to result) per byte, by op; under mu_
  std::atomic<double> start_s_{0};  // a burst's first job's time beyond its bytes at own_spb_, averaged
  std::atomic<uint64_t> gpu_jobs_{0}, cpu_jobs_{0}, skipped_jobs_{0}, bursts_{0};
};

}  // namespace zipccl
