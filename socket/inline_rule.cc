#include "inline_rule.h"

#include <algorithm>

#include "socket_wire.h"

namespace zipccl::tcp {

InlineRule::InlineRule(size_t always, size_t lone, std::atomic<int64_t>* last)
    : always_(std::min(always, kMaxInline)),
      lone_(last && std::min(lone, kMaxInline) > always_ ? std::min(lone, kMaxInline) : 0),
      last_(lone_ ? last : nullptr) {}

bool InlineRule::take(size_t bytes, int64_t now_ns) const {
  if (bytes <= always_) return true;
  if (!last_) return false;
  const int64_t before = last_->exchange(now_ns, std::memory_order_relaxed);
  return bytes <= lone_ && now_ns - before >= kLoneWindowNs;
}

}  // namespace zipccl::tcp
