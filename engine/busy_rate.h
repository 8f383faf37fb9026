// A server's sustained rate, from when its jobs go out and come back: bytes finished per second
// of busy time (time with at least one job out). Jobs queued behind each other count their time
// once and idle gaps not at all, so neither a queue nor a quiet spell reads as a slow server. The
// first job gives the first value; then, every kWindowBytes, bytes over busy time with both sums
// halved: a ratio of sums, so jobs seen finishing in a burst (a poll after a long wait) weigh as
// much as they moved, not as a window of their own.
// Not thread-safe: the caller serialises started() and finished(); bytes_per_s() may be read
// from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace zipccl {

class BusyRate {
 public:
  static constexpr double kWindowBytes = 4 << 20;

  void started(int64_t now_ns) {
    advance(now_ns);
    ++out_;
  }
  void finished(int64_t now_ns, uint64_t bytes) {
    advance(now_ns);
    if (out_ > 0) --out_;
    bytes_ += double(bytes);
    window_ += double(bytes);
    const double old = rate_.load(std::memory_order_relaxed);
    if (busy_ns_ <= 0 || (old > 0 && window_ < kWindowBytes)) return;
    rate_.store(bytes_ * 1e9 / busy_ns_, std::memory_order_relaxed);
    window_ = 0;
    bytes_ *= 0.5;
    busy_ns_ *= 0.5;
  }
  double bytes_per_s() const { return rate_.load(std::memory_order_relaxed); }
  int outstanding() const { return out_; }

 private:
  void advance(int64_t now_ns) {
    if (out_ > 0) busy_ns_ += double(now_ns - last_ns_);
    last_ns_ = now_ns;
  }

  int out_ = 0;
  int64_t last_ns_ = 0;
  double busy_ns_ = 0, bytes_ = 0, window_ = 0;
  std::atomic<double> rate_{0};
};

}  // namespace zipccl
