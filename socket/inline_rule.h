// Which messages a socket link sends inside their header record on the control socket
// (socket_wire.h), moved by NCCL's progress thread itself, and which go to the helper threads.
// Up to `always` bytes every message goes inline. Up to `lone` bytes, a message goes inline only
// when no other message past `always` left this process within kLoneWindowNs: a lone message
// (a latency-bound step, one connection active) saves the helper's wake-up, while in a burst
// over many connections (a collective's step over NCCL's channels) the helpers move the bytes in
// parallel and the progress thread would only serialize them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "clock.h"

namespace zipccl::tcp {

class InlineRule {
 public:
  static constexpr int64_t kLoneWindowNs = 20000;

  // last: when the last message past `always` was sent, shared by every link of the process
  // (null, or lone <= always: no lone messages).
  explicit InlineRule(size_t always, size_t lone = 0, std::atomic<int64_t>* last = nullptr);

  size_t always() const { return always_; }
  // Whether a message of `bytes` sent at now_ns goes inline; with lone messages on, every message
  // past `always` counts as sent for the next decision, inline or not.
  bool take(size_t bytes, int64_t now_ns) const;
  // The same now; the clock is read only where lone messages are on.
  bool take(size_t bytes) const { return bytes <= always_ || (last_ && take(bytes, now_ns())); }

 private:
  size_t always_;
  size_t lone_;
  std::atomic<int64_t>* last_;
};

}  // namespace zipccl::tcp
