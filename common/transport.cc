#include "transport.h"

namespace zipccl {

const char* placement_misfit(const Placement& p, const MessageHeader& h) {
  if (h.compressed && h.why != RawWhy::kUnsaid) return "a compressed message that says why it went raw";
  if (!h.compressed) {
    if (h.wire_bytes != h.orig_bytes) return "a raw message whose sizes disagree";
    if (h.wire_bytes > p.capacity) return "more bytes than the receive takes";
    return nullptr;
  }
  if (p.staging_bytes == 0) return "compressed bytes for a receive that takes raw bytes only";
  if (h.wire_bytes > p.staging_bytes) return "more compressed bytes than the receive's staging takes";
  if (h.orig_bytes > p.capacity) return "it decodes to more bytes than the receive takes";
  return nullptr;
}

std::string placement_tags(const ClearToSend& cts) {
  std::string tags;
  for (uint32_t i = 0; i < cts.n; ++i) tags += " " + std::to_string(cts.p[i].tag);
  return tags;
}

uint32_t placement_for_tag(const ClearToSend& cts, uint32_t filled, int32_t tag) {
  uint32_t sub = 0;
  while (sub < cts.n && (cts.p[sub].tag != tag || (filled >> sub & 1))) ++sub;
  return sub;
}

}  // namespace zipccl
