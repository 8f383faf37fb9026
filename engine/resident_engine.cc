#include "resident_engine.h"

#include <algorithm>

#include "clock.h"
#include "log.h"
#include "moving_average.h"

namespace zipccl {

ResidentEngine::~ResidentEngine() {
  // The kernel finishes every job posted; until then it may write the jobs' buffers.
  const int64_t end = now_ns() + int64_t(10) * 1000000000;
  for (;;) {
    poll();
    std::scoped_lock lk(waiting_mu_, mu_);
    if (inflight_.empty() && waiting_.empty()) return;
    if (now_ns() > end) {
      ZIP_WARN("GPU codec: %zu job(s) still unfinished at teardown", inflight_.size() + waiting_.size());
      return;
    }
  }
}

bool ResidentEngine::fits_gpu(const CodecJob& job) {
  return job.gpu_ok && (job.op == CodecJob::kEncode ? job.src_bytes : job.dst_cap) <= gpu::kServiceMaxJob;
}

bool ResidentEngine::try_gpu(CodecJob* job) {
  const bool encode = job->op == CodecJob::kEncode;
  if (!fits_gpu(*job) || !gpu_->acquire()) return false;
  gpu::ServiceJob j{};
  j.in = job->src;
  j.in_bytes = job->src_bytes;
  j.out = job->dst;
  j.out_cap = job->dst_cap;
  if (encode) {
    j.op = gpu::kServiceEncode;
    j.limit = coded_limit(job->src_bytes, job->max_ratio);
    j.auto_codec = 1;  // as the CPU engine: classify() picks the codec
    j.checksum = job->checksum;
  } else {
    j.op = gpu::kServiceDecode;
    j.in_host = !job->gpu_only;
  }
  std::lock_guard<std::mutex> lk(mu_);
  // Rates count an encode's input and a decode's output; the output's size is known when it is
  // done, and its room stands in until then.
  // A burst's first job: the first a launch of the kernel takes (between collectives it exits).
  const uint32_t launch = gpu_->launches();
  const bool first = inflight_.empty() && launch != measured_launch_;
  InFlight f{job, 0, now_ns(), encode ? job->src_bytes : job->dst_cap, first};
  const bool posted = gpu_->post(j, &f.index);
  gpu_->release();  // a posted job is finished whether or not a lease is held
  if (posted) {
    job->on_gpu = true;  // before poll() may complete it, under the same lock
    gpu_jobs_.fetch_add(1, std::memory_order_relaxed);
    queued_[encode ? 0 : 1].fetch_add(f.queued, std::memory_order_relaxed);
    if (first) measured_launch_ = launch;
    inflight_.push_back(f);
  }
  return posted;
}

void ResidentEngine::submit(CodecJob* job) {
  job->state.store(CodecJob::kQueued, std::memory_order_relaxed);
  job->on_gpu = false;
  job->skipped = false;
  if (job->gpu_only && job->op == CodecJob::kDecode) {
    {
      std::lock_guard<std::mutex> w(waiting_mu_);
      waiting_.push_back(job);
      waiting_n_.store(waiting_.size(), std::memory_order_release);
    }
    post_waiting();
    return;
  }
  if (try_gpu(job)) return;
  if (job->op == CodecJob::kEncode && (!cpu_encodes_ || job->gpu_only)) {
    job->skipped = true;
    job->status = Status::kOk;
    job->codec = Codec::Raw;
    job->out_bytes = 0;
    job->seconds = 0;
    skipped_jobs_.fetch_add(1, std::memory_order_relaxed);
    job->state.store(CodecJob::kDone, std::memory_order_release);
    return;
  }
  cpu_jobs_.fetch_add(1, std::memory_order_relaxed);
  cpu_->submit(job);
}

void ResidentEngine::complete(const InFlight& f) {
  CodecJob* job = f.job;
  const gpu::Result& r = f.r;
  const gpu::JobTimes& times = f.t;
  job->gpu_times = times;
  job->status = static_cast<Status>(r.status);
  job->out_bytes = r.bytes;
  if (job->op == CodecJob::kEncode) job->codec = static_cast<Codec>(r.codec);
  const int64_t now = now_ns();
  job->seconds = double(now - f.t0_ns) * 1e-9;
  const int op = job->op == CodecJob::kEncode ? 0 : 1;
  queued_[op].fetch_sub(f.queued, std::memory_order_relaxed);
  // Tiles of jobs still running count now and their bytes later: over a window it evens out. A
  // lone encode in small tiles spent more CTA time per byte than the kernel's capacity needs, on
  // CTAs that had nothing else to do: it gives only a first rate.
  const uint64_t t = gpu_->tile_ns(op);
  const double bytes = double(op == 0 ? job->src_bytes : job->out_bytes);
  if (!r.small_tiles || rate_[op].bytes_per_s() == 0)
    rate_[op].add(bytes, double(t - tile_ns_seen_[op]) / double(gpu_->ctas()));
  tile_ns_seen_[op] = t;
  // A job's own time: from its first tile to its result on the GPU's clock. A burst's first job
  // is measured against the others' (its own tiles may be the slow ones).
  const bool timed = times.start != 0 && times.end >= times.start && bytes > 0;
  if (timed && !f.first) {
    const double spb = double(times.end - times.start) * 1e-9 / bytes;
    own_spb_[op] = moved_toward(own_spb_[op], spb, kOwnWeight);
  }
  if (f.first && own_spb_[op] > 0) {
    const double extra = std::max(0.0, job->seconds - bytes * own_spb_[op]);
    start_s_.store(moved_toward(start_s_.load(std::memory_order_relaxed), extra, kStartWeight),
                   std::memory_order_relaxed);
    bursts_.fetch_add(1, std::memory_order_relaxed);
  }
  job->state.store(CodecJob::kDone, std::memory_order_release);
}

void ResidentEngine::post_waiting() {
  if (waiting_n_.load(std::memory_order_acquire) == 0) return;  // every progress call passes here
  std::unique_lock<std::mutex> w(waiting_mu_, std::try_to_lock);
  if (!w.owns_lock()) return;  // another thread is posting them
  while (!waiting_.empty()) {
    CodecJob* job = waiting_.front();
    bool posted = false;
    if (job->cancelled.load(std::memory_order_acquire)) {
      job->status = Status::kNoSpace;
    } else if (!fits_gpu(*job)) {
      job->status = Status::kTooLarge;  // a peer's claim no kernel job can hold
    } else if (!(posted = try_gpu(job))) {
      return;
    }
    waiting_.pop_front();
    waiting_n_.store(waiting_.size(), std::memory_order_release);
    if (!posted) job->state.store(CodecJob::kDone, std::memory_order_release);
  }
}

void ResidentEngine::poll() {
  post_waiting();
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Newest first, then completed in post order: where the kernel finishes jobs in order, a
    // finished job's elders are seen finished too, so a burst's first job is measured against the
    // own times of jobs before it, never of those behind it that finished while poll looked.
    for (auto it = inflight_.rbegin(); it != inflight_.rend(); ++it) {
      it->done = gpu_->poll(it->index, &it->r, &it->t);
    }
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      if (it->done) {
        complete(*it);
        it = inflight_.erase(it);
      } else {
        ++it;
      }
    }
  }
  cpu_->poll();
}

double ResidentEngine::throughput(CodecJob::Op op) const {
  return rate_[op == CodecJob::kEncode ? 0 : 1].bytes_per_s();
}

double ResidentEngine::queued_seconds() const {
  double s = 0;
  for (int op = 0; op < 2; ++op) {
    const double rate = rate_[op].bytes_per_s();
    if (rate > 0) s += double(queued_[op].load(std::memory_order_relaxed)) / rate;
  }
  return s + burst_left();
}

double ResidentEngine::burst_left() const {
  if (gpu_->state() != ResidentCodec::kRunning) return 0;
  // A launch's burst begins the first time its link asks, whether that message is coded or not
  // (NCCL's copies start with the collective): its start then runs down with the clock.
  const uint32_t launch = gpu_->launches();
  const int64_t now = now_ns();
  if (burst_launch_.load(std::memory_order_acquire) != launch) {
    std::lock_guard<std::mutex> g(burst_mu_);
    if (burst_launch_.load(std::memory_order_relaxed) != launch) {
      burst_ns_.store(now, std::memory_order_relaxed);
      burst_launch_.store(launch, std::memory_order_release);
    }
  }
  return std::max(0.0, start_s_.load(std::memory_order_relaxed) -
                           double(now - burst_ns_.load(std::memory_order_relaxed)) * 1e-9);
}

bool ResidentEngine::throughput_settled(CodecJob::Op op) const {
  return rate_[op == CodecJob::kEncode ? 0 : 1].settled();
}

}  // namespace zipccl
