#include "link_meter.h"

#include <chrono>
#include <map>
#include <memory>

namespace zipccl {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void LinkMeter::started() {
  std::lock_guard<std::mutex> g(mu_);
  rate_.started(now_ns());
}

void LinkMeter::finished(uint64_t wire_bytes) {
  std::lock_guard<std::mutex> g(mu_);
  rate_.finished(now_ns(), wire_bytes);
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
