#include "link_meter.h"

#include <algorithm>
#include <map>
#include <memory>

namespace zipccl {

void LinkMeter::add(int64_t start_ns, int64_t end_ns, uint64_t wire_bytes) {
  std::lock_guard<std::mutex> g(mu_);
  const int64_t from = std::max(start_ns, covered_ns_);
  if (end_ns > from) busy_ns_ += end_ns - from;
  covered_ns_ = std::max(covered_ns_, end_ns);
  bytes_ += double(wire_bytes);
  const double old = rate_.load(std::memory_order_relaxed);
  if (busy_ns_ <= 0 || (old > 0 && bytes_ < kWindowBytes)) return;
  const double v = bytes_ * 1e9 / double(busy_ns_);
  rate_.store(old == 0 ? v : 0.5 * old + 0.5 * v, std::memory_order_relaxed);
  bytes_ = 0;
  busy_ns_ = 0;
}

LinkMeter* link_meter(int dev) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<LinkMeter>> meters;
  std::lock_guard<std::mutex> g(mu);
  std::unique_ptr<LinkMeter>& m = meters[dev];
  if (!m) m.reset(new LinkMeter);
  return m.get();
}

}  // namespace zipccl
