#include "resident_codec.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "clock.h"
#include "log.h"

namespace zipccl {
namespace {

// One round of a launcher's poll of mapped memory begun at since_ns: the first 200 us without
// sleeping (a sleep of 20 us lasts 70 us or more: a thread's default timer slack is 50 us), then
// naps of nap_us.
void poll_pause(int64_t since_ns, int nap_us) {
  if (now_ns() - since_ns < 200000)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(nap_us));
}

std::vector<int64_t> sorted(std::vector<int64_t> t) {
  std::sort(t.begin(), t.end());
  return t;
}

// Quantile q of sorted times t (ns), in us.
long long quantile_us(const std::vector<int64_t>& t, double q) {
  return (long long)(t[size_t(q * double(t.size() - 1))] / 1000);
}

}  // namespace

ResidentCodec::ResidentCodec(std::unique_ptr<ServiceDevice> device, const Options& options)
    : device_(std::move(device)), host_(device_->host()), opt_(options) {
  last_active_ns_.store(now_ns(), std::memory_order_relaxed);
}

std::shared_ptr<ResidentCodec> ResidentCodec::create(std::unique_ptr<ServiceDevice> device, const Options& options) {
  std::shared_ptr<ResidentCodec> c(new ResidentCodec(std::move(device), options));
  c->launcher_ = std::thread([self = c] {
    self->run();
    std::lock_guard<std::mutex> lk(self->mu_);
    self->launcher_done_ = true;
    self->cv_.notify_all();
  });
  return c;
}

ResidentCodec::~ResidentCodec() {
  // The kernel may still read and write the device side's memory: never free it under it.
  if (leaked_) (void)device_.release();
}

bool ResidentCodec::shutdown() {
  std::unique_lock<std::mutex> lk(mu_);
  quit_.store(true, std::memory_order_release);
  cv_.notify_all();
  const auto limit = std::chrono::milliseconds(2 * opt_.exit_wait_ms);
  const bool done = cv_.wait_for(lk, limit, [this] { return launcher_done_; });
  lk.unlock();
  if (!launcher_.joinable()) return done;  // an earlier call joined or left it
  if (done) {
    // Joined, not left to finish: past its last word the thread still runs this library's code,
    // and NCCL unloads the plugin (dlclose) once its last communicator is gone.
    launcher_.join();
    return true;
  }
  launcher_.detach();  // it holds the object until the call returns
  ZIP_WARN("GPU codec: its launcher is still inside a CUDA call after %lld ms; leaving it", (long long)limit.count());
  return false;
}

bool ResidentCodec::acquire() {
  uint64_t w = word_.load(std::memory_order_acquire);
  while ((w & kStateMask) == kRunning)
    if (word_.compare_exchange_weak(w, w + kLease, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  wake_launcher();
  return false;
}

void ResidentCodec::prewarm() {
  if (state() != kRunning) wake_launcher();
}

void ResidentCodec::wake_launcher() {
  // Under its mutex, so that it cannot miss the wake-up between looking at demand_ and sleeping
  // (it never holds the mutex across a CUDA call).
  if (!demand_.exchange(true, std::memory_order_acq_rel)) {
    demand_ns_.store(now_ns(), std::memory_order_relaxed);
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();  // shutdown() may wait on it too
  }
}

void ResidentCodec::release() {
  last_active_ns_.store(now_ns(), std::memory_order_relaxed);
  word_.fetch_sub(kLease, std::memory_order_release);
}

bool ResidentCodec::post(const gpu::ServiceJob& job, uint64_t* index) {
  std::lock_guard<std::mutex> lk(post_mu_);
  std::atomic<uint8_t>& unread = unread_[tail_ % gpu::kServiceRing];
  if (unread.load(std::memory_order_acquire)) return false;
  unread.store(1, std::memory_order_relaxed);
  unread_count_.fetch_add(1, std::memory_order_relaxed);
  gpu::service_post(host_, tail_, job);
  *index = tail_++;
  return true;
}

bool ResidentCodec::poll(uint64_t index, gpu::Result* r, gpu::JobTimes* t) {
  if (!gpu::service_poll(host_, index, r, t)) return false;
  unread_[index % gpu::kServiceRing].store(0, std::memory_order_release);
  last_active_ns_.store(now_ns(), std::memory_order_relaxed);
  unread_count_.fetch_sub(1, std::memory_order_release);
  return true;
}

bool ResidentCodec::set_state(State from, State to) {
  uint64_t w = from;  // with no lease held
  return word_.compare_exchange_strong(w, to, std::memory_order_acq_rel, std::memory_order_acquire);
}

void ResidentCodec::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!quit_.load(std::memory_order_acquire)) {
    if (state() == kRunning) {
      stop_if_idle(lk);
      continue;
    }
    const int64_t now = now_ns();
    if (leaked_ || !demand_.load(std::memory_order_acquire)) {  // leaked: off for good
      cv_.wait_for(lk, std::chrono::seconds(1));
    } else if (now < retry_at_ns_) {
      cv_.wait_for(lk, std::chrono::nanoseconds(retry_at_ns_ - now));
    } else {
      lk.unlock();
      start();
      lk.lock();
    }
  }
  lk.unlock();
  if (state() == kRunning && !set_state(kRunning, kStopping))
    ZIP_WARN("GPU codec: a lease is still held at shutdown");
  if (state() == kStopping && !leaked_) stop();
}

void ResidentCodec::start() {
  const int64_t asked = demand_ns_.load(std::memory_order_relaxed);  // later demands find it starting
  const int64_t awake = now_ns();
  demand_.store(false, std::memory_order_release);
  if (!set_state(kStopped, kStarting)) return;
  __atomic_store_n(&host_->stop, uint64_t(0), __ATOMIC_RELEASE);
  const uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
  std::string err;
  if (!device_->launch(g, opt_.ctas, &err)) {
    ZIP_WARN("GPU codec: launching the resident kernel failed (%s); nothing is coded on the GPU until a retry "
             "in %lld ms succeeds",
             err.c_str(), (long long)opt_.retry_ms);
    retry_at_ns_ = now_ns() + opt_.retry_ms * 1000000;
    set_state(kStarting, kStopped);
    return;
  }
  generation_.store(g, std::memory_order_release);
  // A launch may wait behind other work before it gets SMs: leases are granted once it runs.
  // Callers wait for that (NCCL_ZIP_GPU_WAIT_US): poll_pause() polls the first 200 us unslept.
  const int64_t launched = now_ns();
  while (!gpu::service_started(host_, g)) {
    if (quit_.load(std::memory_order_acquire)) {
      set_state(kStarting, kStopping);
      return;  // run()'s shutdown stops it
    }
    poll_pause(launched, 20);
  }
  const int64_t running = now_ns();
  if (start_ns_.size() < kStartSamples) {
    start_ns_.push_back(running - asked);
    awake_ns_.push_back(awake - asked);
    launch_ns_.push_back(launched - awake);
    run_ns_.push_back(running - launched);
  }
  last_active_ns_.store(running + std::max<int64_t>(0, opt_.start_grace_us - opt_.idle_us) * 1000,
                        std::memory_order_relaxed);
  demand_.store(false, std::memory_order_release);  // whoever asked meanwhile finds it running
  set_state(kStarting, kRunning);
  ZIP_TRACE("GPU codec: resident kernel %u running", g);
}

int64_t ResidentCodec::start_us(double q) const { return start_ns_.empty() ? -1 : quantile_us(sorted(start_ns_), q); }

std::string ResidentCodec::start_summary() const {
  if (start_ns_.empty()) return "";
  const std::vector<int64_t> all = sorted(start_ns_);
  char buf[256];
  int n = snprintf(buf, sizeof buf,
                   "started %u times, %lld us median from demand to running (p90 %lld, max %lld; medians: awake %lld, "
                   "launch call %lld, to running %lld)",
                   launches(), quantile_us(all, 0.5), quantile_us(all, 0.9), quantile_us(all, 1.0),
                   quantile_us(sorted(awake_ns_), 0.5), quantile_us(sorted(launch_ns_), 0.5),
                   quantile_us(sorted(run_ns_), 0.5));
  if (const int sms = gpu::service_sms(host_, opt_.ctas); sms > 0 && n > 0 && size_t(n) < sizeof buf)
    snprintf(buf + n, sizeof buf - n, ", the last launch's %d CTAs on %d SMs", opt_.ctas, sms);
  return buf;
}

void ResidentCodec::stop_if_idle(std::unique_lock<std::mutex>& lk) {
  const int64_t idle_ns = opt_.idle_us * 1000;
  const int64_t since = now_ns() - last_active_ns_.load(std::memory_order_relaxed);
  const bool held = (word_.load(std::memory_order_acquire) >> 2) != 0 ||
                    unread_count_.load(std::memory_order_acquire) != 0;
  if (held || since < idle_ns) {
    // While held, look again after the idle time (at least 100 us: no spinning at idle 0).
    cv_.wait_for(lk, std::chrono::nanoseconds(held ? std::max<int64_t>(idle_ns, 100000) : idle_ns - since));
    return;
  }
  if (!set_state(kRunning, kStopping)) return;  // a lease came in meanwhile
  lk.unlock();
  stop();
  lk.lock();
}

bool ResidentCodec::wait_memory(bool (*seen)(const gpu::ServiceHost*, uint32_t), int64_t limit_ms) {
  const uint32_t g = generation_.load(std::memory_order_acquire);
  const int64_t start = now_ns(), end = start + limit_ms * 1000000;
  while (!seen(host_, g)) {
    if (now_ns() > end) return false;
    poll_pause(start, 50);
  }
  return true;
}

void ResidentCodec::stop() {
  {
    std::lock_guard<std::mutex> lk(post_mu_);  // no lease is held, so no post is under way
    gpu::service_stop(host_, tail_);
  }
  if (!wait_memory(gpu::service_exited, opt_.exit_wait_ms)) {
    ZIP_WARN("GPU codec: the resident kernel %u did not exit within %lld ms; the GPU codec stays off",
             generation_.load(), (long long)opt_.exit_wait_ms);
    leaked_ = true;
    return;  // kStopping for good: no lease is granted again
  }
  std::string err;
  if (!device_->reap(&err)) ZIP_WARN("GPU codec: after the resident kernel: %s", err.c_str());
  set_state(kStopping, kStopped);
  ZIP_TRACE("GPU codec: resident kernel %u exited", generation_.load());
}

}  // namespace zipccl
