#include "cold_wait.h"

#include <algorithm>

namespace zipccl {

bool ColdWait::wait(bool running, int64_t now_ns) {
  if (running) {
    if (cold_) pause_ns_ = kMinPauseNs;  // started within the wait
    cold_ = false;
    return false;
  }
  if (wait_ns_ <= 0 || now_ns < no_wait_until_ns_) return false;
  if (!cold_) {
    cold_ = true;
    cold_since_ns_ = now_ns;
    ++waits_;
  }
  if (now_ns - cold_since_ns_ < wait_ns_) return true;
  ++vain_;
  cold_ = false;
  no_wait_until_ns_ = now_ns + pause_ns_;
  pause_ns_ = std::min(2 * pause_ns_, kMaxPauseNs);
  return false;
}

}  // namespace zipccl
