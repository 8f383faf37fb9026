// The encoder's plan of an item: its codec, whether it is too large or goes Raw before coding,
// and its coded layout; the same in every tile, the fixup and the finisher.
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

// Per-item decision shared by every tile and the finalizer.
struct Plan {
  Codec c;
  bool too_large;
  bool raw;  // Raw message decided before coding (codec, size or layout alone)
  Layout L;
};

__device__ __forceinline__ Plan make_plan(const LaunchItem& it, Codec c) {
  Plan p{};
  p.c = c;
  const uint32_t eb = geometry(c).elem_bytes;
  p.too_large = c != Codec::Raw && (it.bytes >> (eb / 2)) > kMaxElems;  // bytes / eb, eb in {2, 4}
  p.raw = c == Codec::Raw || it.bytes < eb;
  if (!p.raw && !p.too_large) {
    p.L = make_layout(c, it.bytes);
    p.raw = p.L.off_esc > it.limit || p.L.off_esc > it.cap;  // a tie with Raw stays coded, as on the CPU
  }
  return p;
}

// An item's plan once encode_kernel has finished (an auto item's codec is in temp by then).
__device__ __forceinline__ Plan finished_plan(const Launch& P, int item) {
  const LaunchItem& it = P.items[item];
  const volatile uint32_t& chosen = P.item_codec[item];
  return make_plan(it, it.auto_codec ? static_cast<Codec>(chosen & 0xFF) : static_cast<Codec>(it.codec));
}

}  // namespace
}  // namespace zipccl::gpu::detail
