// Bytes per second of busy time as a ratio of sums, both halved every window of bytes: samples
// that arrive in bursts (a poll after a long wait) weigh as much as they moved, not as a window
// of their own, and the past fades within a few windows. The link meter's and the GPU codec's.
#pragma once

#include <atomic>

namespace zipccl {

class WindowedRate {
 public:
  // first_sample: the first sample gives the first value; otherwise 0 until a whole window.
  WindowedRate(double window_bytes, bool first_sample) : window_bytes_(window_bytes), first_sample_(first_sample) {}

  // bytes moved in busy_ns more nanoseconds of busy time. Not thread-safe: the caller serialises
  // add(); bytes_per_s() may be read from any thread.
  void add(double bytes, double busy_ns) {
    bytes_ += bytes;
    busy_ns_ += busy_ns;
    window_ += bytes;
    const bool first = first_sample_ && rate_.load(std::memory_order_relaxed) == 0;
    if (busy_ns_ <= 0 || (!first && window_ < window_bytes_)) return;
    rate_.store(bytes_ * 1e9 / busy_ns_, std::memory_order_relaxed);
    if (window_ >= window_bytes_) settled_.store(true, std::memory_order_relaxed);
    window_ = 0;
    bytes_ *= 0.5;
    busy_ns_ *= 0.5;
  }
  double bytes_per_s() const { return rate_.load(std::memory_order_relaxed); }
  // The rate rests on a whole window of bytes, not on a first sample alone.
  bool settled() const { return settled_.load(std::memory_order_relaxed); }

 private:
  const double window_bytes_;
  const bool first_sample_;
  double bytes_ = 0, busy_ns_ = 0, window_ = 0;
  std::atomic<double> rate_{0};
  std::atomic<bool> settled_{false};
};

}  // namespace zipccl
