// The end of an item's encode, by one CTA once every tile is coded: the escape section's
// length, the header and padding or the Raw message the item falls back to, temp zeroed for the
// next launch, and the published result.
#pragma once

#include <cstdint>

#include "crc32c.cuh"
#include "cta.cuh"
#include "encode_frame.cuh"
#include "encode_plan.cuh"
#include "encode_shared.cuh"
#include "launch.cuh"
#include "tiling.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

// A coded item's escape bytes once the encode kernel has finished: in bulk launches with
// scratch the sum of its groups' (a deferred tile publishes no inclusive prefix), else the last
// tile's inclusive prefix (every tile looked back). For the whole CTA.
template <int MU>
__device__ __forceinline__ uint64_t item_escapes(const Launch& P, int item, const Plan& p,
                                                 const unsigned long long* st, EncShared& sh) {
  const LaunchItem& it = P.items[item];
  if (MU == 1 || !P.group_esc) {
    const uint32_t last = (p.L.n_blocks - 1) / tile_blocks<MU>(p.c);
    return *reinterpret_cast<const volatile unsigned long long*>(st + last) & 0xFFFFFFFFull;
  }
  // Volatile loads here and in finished_plan(): encode_finish_kernel reads the encode kernel's
  // words before its own wait, which orders it after the fixup kernel only.
  uint32_t sum = 0;  // an item's escape bytes fit a state word's 32 bits
  const volatile uint32_t* group = P.group_esc + group_slot(it.tile0, item, 0);
  for (uint32_t i = threadIdx.x; i < item_groups(it.tiles); i += kThreads) sum += group[i];
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = sum;
  __syncthreads();
  sum = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += sh.red[w];
  return sum;
}

// Complete an item's message (its header and padding, or the Raw message it falls back to),
// leave temp zeroed and publish the result. In bulk launches (encode_finish_kernel) a coded
// message's header and padding are written while the fixup kernel is still placing escape
// chunks; a Raw copy, which overwrites them, and the result wait for it.
template <int MU>
__device__ void finalize(const Launch& P, int item, const Plan& p, unsigned long long* st, EncShared& sh) {
  const LaunchItem& it = P.items[item];
  const uint64_t n = it.bytes;
  Status status = Status::kOk;
  uint64_t total = 0;
  bool raw = p.raw, raw_copied = p.raw, from_input = false;
  Codec c = p.c;
  if (p.too_large) {
    status = Status::kTooLarge;
  } else {
    uint64_t esc_bytes = 0;
    if (!raw) {
      esc_bytes = item_escapes<MU>(P, item, p, st, sh);
      raw = p.L.off_esc + esc_bytes > min(it.limit, it.cap);
      raw_copied = false;
    }
    const uint32_t crc = P.checksum ? cta_crc32c(it.in, n, sh.crc) : 0;
    if (raw) {
      if (MU > 1) grid_dependency_wait();
      c = Codec::Raw;
      from_input = P.raw_header_only;
      if (it.cap < kHeaderBytes + (from_input ? 0 : n)) {
        status = Status::kNoSpace;
      } else {
        if (!raw_copied && !from_input) cta_copy(it.out + kHeaderBytes, it.in, n);
        if (threadIdx.x < 32) warp_put_header(it.out, sh, make_layout(Codec::Raw, n), n, it.in, P.checksum, crc);
        total = kHeaderBytes + n;
      }
    } else {
      // In small launches the last block's tile has zeroed the padding and, without a
      // checksum, written the header (encode_unit).
      const Layout& L = p.L;
      if (MU > 1) zero_padding(L, it.out, threadIdx.x, kThreads);
      if ((MU > 1 || P.checksum) && threadIdx.x < 32)
        warp_put_header(it.out, sh, L, esc_bytes, it.in + L.n_elems * L.g.elem_bytes, P.checksum, crc);
      total = L.off_esc + esc_bytes;
    }
  }
  if (MU > 1) grid_dependency_wait();  // (returns at once after the Raw branch's)
  // Leave temp zeroed for the next launch, once every thread has read the last tile's state.
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < it.tiles; i += kThreads) st[i] = 0;
  if (P.group_esc)
    for (uint32_t i = threadIdx.x; i < item_groups(it.tiles); i += kThreads)
      P.group_esc[group_slot(it.tile0, item, 0) + i] = 0;
  __syncthreads();  // the CTA's writes (a Raw copy) before the result
  if (threadIdx.x == 0) {
    P.item_done[item] = 0;
    P.item_codec[item] = 0;
    publish_result(P, item, total, status, c, from_input && status == Status::kOk);
  }
}

}  // namespace
}  // namespace zipccl::gpu::detail
