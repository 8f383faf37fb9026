// The decoder's reads and checks of an untrusted message's header and block entries: errors
// ranked by their position in the message, reads within the bytes received, the header check,
// and the layout a header claims.
#pragma once

#include <cstdint>
#include <cstring>

#include "decode_shared.cuh"
#include "launch.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

// Record an error at position order (0 header, b+1 block b, n_blocks+1 final tiling); the
// smallest order wins.
__device__ __forceinline__ void report(const Launch& P, int item, uint32_t order, Status s) {
  atomicMax(&P.item_err[item], ~((order << 4) | static_cast<uint32_t>(s)));
}

// Byte i of an item's header, 0 when fewer than kHeaderBytes were received (the header check
// reports the truncation).
__device__ __forceinline__ uint8_t header_byte(const LaunchItem& it, uint32_t i) {
  return it.bytes >= kHeaderBytes ? it.in[i] : 0;
}

__device__ __forceinline__ BlockEntry load_entry(const uint8_t* p) {
  BlockEntry e;
  memcpy(&e, p, sizeof e);
  return e;
}

// Thread 0: the CPU decoder's header checks (check_header() and the output capacity); the
// checker tile reports a failure. The result and the layout go to shared memory for the next
// barrier.
__device__ void check(const Launch& P, int item, bool reports, DecShared& sh) {
  const LaunchItem& it = P.items[item];
  Layout L{};
  Status s = check_header(sh.header, it.bytes, &L);
  if (s == Status::kOk && it.cap < L.orig_bytes) s = Status::kNoSpace;
  if (s != Status::kOk && reports) report(P, item, 0, s);
  sh.status = static_cast<int>(s);
  sh.L = L;
}

// The layout a header claims, read from its fields without check_header(), which the item's
// checker tile runs meanwhile. Used only where format.h's claimed_layout_in_bounds() holds
// (false only for headers the checker refuses, and then the tile reads and writes nothing):
// then sums of these fields cannot wrap, 16-byte copies stay aligned, escape reads stay within
// the message and block writes within the output.
template <Codec C>
__device__ __forceinline__ Layout claimed_layout(const Header& h) {
  Layout L{};
  L.codec = C;
  L.g = geometry(C);
  L.n_elems = h.n_elems;
  L.n_blocks = h.n_blocks;
  L.off_res = h.off_res;
  L.res_stride = h.res_stride;
  L.off_bits = h.off_bits;
  L.bit_stride = h.bit_stride;
  L.off_esc = h.off_esc;
  return L;
}

}  // namespace
}  // namespace zipccl::gpu::detail
