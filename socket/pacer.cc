#include "pacer.h"

#include <algorithm>

#include "clock.h"

namespace zipccl::tcp {

Pacer::Pacer(double bytes_per_s)
    : rate_(bytes_per_s * 1e-9), burst_(std::max(65536.0, bytes_per_s * 5e-4)), tokens_(burst_), last_ns_(now_ns()) {}

void Pacer::refill() {
  const int64_t t = now_ns();
  tokens_ = std::min(burst_, tokens_ + double(t - last_ns_) * rate_);
  last_ns_ = t;
}

size_t Pacer::take(size_t want, int64_t* wait_ns) {
  std::lock_guard<std::mutex> g(mu_);
  refill();
  // Sends of at least kMinGrant bytes (or the whole rest): no stream of tiny system calls.
  const double need = std::min(double(want), kMinGrant);
  if (tokens_ < need) {
    *wait_ns = int64_t((need - tokens_) / rate_) + 1;
    return 0;
  }
  const size_t n = std::min(want, size_t(tokens_));
  tokens_ -= double(n);
  return n;
}

void Pacer::give_back(size_t unused) {
  std::lock_guard<std::mutex> g(mu_);
  tokens_ = std::min(burst_, tokens_ + double(unused));
}

}  // namespace zipccl::tcp
