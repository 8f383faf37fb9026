#include "link_meter.h"

#include <algorithm>
#include <map>
#include <memory>

#include "clock.h"

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
  if (s.end > from) busy_ns_ += double(s.end - from);
  covered_ns_ = std::max(covered_ns_, s.end);
  bytes_ += double(s.bytes);
  window_ += double(s.bytes);
  if (window_ < kWindowBytes || busy_ns_ <= 0) return;
  rate_.store(bytes_ * 1e9 / busy_ns_, std::memory_order_relaxed);
  window_ = 0;
  bytes_ *= 0.5;
  busy_ns_ *= 0.5;
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
