#include "link_meter.h"

#include <map>
#include <memory>

#include "clock.h"

namespace zipccl {

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
