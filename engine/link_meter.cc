#include "link_meter.h"

#include <algorithm>

#include "clock.h"
#include "engine_params.h"

namespace zipccl {

void LinkMeter::add(int64_t start_ns, int64_t end_ns, uint64_t wire_bytes) {
  add(start_ns, end_ns, wire_bytes, now_ns());
}

void LinkMeter::add(int64_t start_ns, int64_t end_ns, uint64_t wire_bytes, int64_t now) {
  std::lock_guard<std::mutex> g(mu_);
  settling_.push(Span{start_ns, std::max(start_ns, end_ns), wire_bytes});
  const int64_t horizon = now - kSettleNs;
  while (!settling_.empty() && settling_.top().start <= horizon) {
    const Span& s = settling_.top();
    if (closed_ns_ < 0) closed_ns_ = s.start;
    if (s.end > closed_ns_ || (s.end == s.start && s.start >= closed_ns_)) open_.push_back(s);
    settling_.pop();
  }
  if (closed_ns_ >= 0 && horizon > closed_ns_) close_until(horizon);
}

void LinkMeter::close_until(int64_t to) {
  const int64_t from = closed_ns_;
  // A span tested late settles after later-starting ones: the union needs them in start order.
  const auto by_start = [](const Span& x, const Span& y) { return x.start < y.start; };
  if (!std::is_sorted(open_.begin(), open_.end(), by_start)) std::sort(open_.begin(), open_.end(), by_start);
  double bytes = 0, busy = 0;
  int64_t run_end = from;     // the union so far reaches here
  int64_t first_busy = -1;    // where the union starts in [from, to)
  for (const Span& s : open_) {
    const int64_t a = std::max(s.start, from), b = std::min(s.end, to);
    if (s.end == s.start) {  // moved in no measurable time: all its bytes where it lies
      if (s.start >= from && s.start < to) bytes += double(s.bytes);
      continue;
    }
    if (b <= a) continue;
    bytes += double(s.bytes) * double(b - a) / double(s.end - s.start);
    if (b > run_end) {
      if (first_busy < 0) first_busy = std::max(a, run_end);
      busy += double(b - std::max(a, run_end));
      run_end = b;
    }
  }
  open_.erase(std::remove_if(open_.begin(), open_.end(),
                             [&](const Span& s) { return s.end == s.start ? s.start < to : s.end <= to; }),
              open_.end());
  closed_ns_ = to;
  if (bytes == 0 && busy == 0) return;
  rate_.add(bytes, busy);
  // A partial window before an idle gap longer than half its busy time was sparse: it starts over
  // (else a burst phase would spoil the first window of the busy phase after it). A window's wall
  // time runs from its first busy moment to its last: idle time around it is not the link's.
  if (window_bytes_ > 0 && first_busy >= 0 && double(first_busy - window_to_ns_) > window_busy_ns_ / 2)
    window_bytes_ = window_busy_ns_ = 0;
  if (window_bytes_ == 0) window_from_ns_ = first_busy >= 0 ? first_busy : from;
  if (first_busy >= 0) window_to_ns_ = run_end;
  window_bytes_ += bytes;
  window_busy_ns_ += busy;
  if (window_bytes_ < kWindowBytes) return;
  const double wall = double(window_to_ns_ - window_from_ns_);
  if (window_busy_ns_ > 0 && window_busy_ns_ >= kPeakBusyShare * wall) {
    peak_.store(std::max(peak_.load(std::memory_order_relaxed), window_bytes_ * 1e9 / window_busy_ns_),
                std::memory_order_relaxed);
  }
  window_bytes_ = window_busy_ns_ = 0;
}

const LinkMeter* planning_meter(int dev) { return link_mbps() > 0 ? nullptr : link_meter(dev); }

}  // namespace zipccl
