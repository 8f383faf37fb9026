#include "link_meter.h"

#include <algorithm>
#include <map>
#include <memory>

#include "clock.h"
#include "engine_params.h"

namespace zipccl {

void LinkMeter::add(int64_t start_ns, int64_t end_ns, uint64_t wire_bytes) {
  add(start_ns, end_ns, wire_bytes, now_ns());
}

void LinkMeter::add(int64_t start_ns, int64_t end_ns, uint64_t wire_bytes, int64_t now) {
  std::lock_guard<std::mutex> g(mu_);
  settling_.push(Span{start_ns, std::max(start_ns, end_ns), wire_bytes});
  while (!settling_.empty() && settling_.top().start <= now - kSettleNs) {
    count(settling_.top());
    settling_.pop();
  }
}

void LinkMeter::count(const Span& s) {
  const int64_t from = std::max(s.start, covered_ns_);
  const double busy = s.end > from ? double(s.end - from) : 0;
  rate_.add(double(s.bytes), busy);
  if (window_bytes_ == 0) window_from_ns_ = from;
  window_bytes_ += double(s.bytes);
  window_busy_ns_ += busy;
  covered_ns_ = std::max(covered_ns_, s.end);
  if (window_bytes_ < kWindowBytes) return;
  const double wall = double(covered_ns_ - window_from_ns_);
  if (window_busy_ns_ > 0 && window_busy_ns_ >= kPeakBusyShare * wall) {
    peak_.store(std::max(peak_.load(std::memory_order_relaxed), window_bytes_ * 1e9 / window_busy_ns_),
                std::memory_order_relaxed);
  }
  window_bytes_ = window_busy_ns_ = 0;
}

LinkMeter* link_meter(int dev) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<LinkMeter>> meters;
  std::lock_guard<std::mutex> g(mu);
  std::unique_ptr<LinkMeter>& m = meters[dev];
  if (!m) m.reset(new LinkMeter);
  return m.get();
}

const LinkMeter* planning_meter(int dev) { return link_mbps() > 0 ? nullptr : link_meter(dev); }

}  // namespace zipccl
