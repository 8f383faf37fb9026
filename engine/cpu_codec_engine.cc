// CPU codec engine: the reference codec of kernels/cpu on worker threads, so the progress thread
// only queues work and polls flags.
#include <pthread.h>

#include <chrono>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "codec_engine.h"
#include "log.h"
#include "engine_params.h"
#include "moving_average.h"

namespace zipccl {
namespace {

class CpuCodecEngine : public CodecEngine {
 public:
  explicit CpuCodecEngine(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { run(); });
    ZIP_INFO(NCCL_INIT | NCCL_NET, "CPU codec engine started with %d thread(s)", threads);
  }
  ~CpuCodecEngine() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  const char* name() const override { return "cpu"; }

  void submit(CodecJob* job) override {
    job->state.store(CodecJob::kQueued, std::memory_order_relaxed);
    job->next = nullptr;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (tail_) tail_->next = job;
      else head_ = job;
      tail_ = job;
    }
    cv_.notify_one();
  }

  void poll() override {}

  double throughput(CodecJob::Op op) const override {
    return bps_[op].load(std::memory_order_relaxed) * double(workers_.size());
  }

 private:
  void run() {
    pthread_setname_np(pthread_self(), "zip-codec");
    for (;;) {
      CodecJob* job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] { return stop_ || head_; });
        if (!head_) return;  // stopping and drained
        job = head_;
        head_ = job->next;
        if (!head_) tail_ = nullptr;
      }
      execute(job);
      job->state.store(CodecJob::kDone, std::memory_order_release);
    }
  }

  void execute(CodecJob* job) {
    if (job->cancelled.load(std::memory_order_acquire)) {
      job->status = zipccl::Status::kNoSpace;
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    zipccl::Codec tried = zipccl::Codec::Raw;
    if (job->op == CodecJob::kEncode) {
      tried = zipccl::classify(job->src, job->src_bytes);
      zipccl::EncodeOptions opt;
      opt.checksum = job->checksum;
      opt.max_ratio = job->max_ratio;
      job->status = zipccl::encode(tried, job->src, job->src_bytes, job->dst, job->dst_cap, &job->out_bytes, opt);
      // What was emitted: a coding that saved too little comes out as a Raw message.
      zipccl::Header h{};
      h.codec = uint8_t(tried);
      if (job->status == zipccl::Status::kOk && job->out_bytes >= sizeof h) std::memcpy(&h, job->dst, sizeof h);
      job->codec = zipccl::Codec(h.codec);
    } else {
      job->status = zipccl::decode(job->src, job->src_bytes, job->dst, job->dst_cap, &job->out_bytes);
    }
    job->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Throughput of uncompressed bytes, a moving average over jobs big enough to time well.
    const double bytes = job->op == CodecJob::kEncode ? double(job->src_bytes) : double(job->out_bytes);
    const bool coded = job->op == CodecJob::kDecode || tried != zipccl::Codec::Raw;
    if (coded && job->status == zipccl::Status::kOk && bytes >= 64 * 1024 && job->seconds > 0) {
      const double v = bytes / job->seconds;
      const double old = bps_[job->op].load(std::memory_order_relaxed);
      bps_[job->op].store(moved_toward(old, v, 5), std::memory_order_relaxed);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  CodecJob* head_ = nullptr;
  CodecJob* tail_ = nullptr;
  bool stop_ = false;
  std::atomic<double> bps_[2] = {0.0, 0.0};  // per CodecJob::Op
};

std::mutex g_mu;
CpuCodecEngine* g_engine = nullptr;
int g_refs = 0;

}  // namespace

CodecEngine* acquire_cpu_codec() {
  std::lock_guard<std::mutex> g(g_mu);
  if (g_refs++ == 0) g_engine = new CpuCodecEngine(cpu_threads());
  return g_engine;
}

void release_cpu_codec() {
  std::lock_guard<std::mutex> g(g_mu);
  if (--g_refs == 0) {
    delete g_engine;
    g_engine = nullptr;
  }
}

}  // namespace zipccl
