// The fixup of bulk launches, after encode_kernel: a warp per tile, kFixupWarps tiles per CTA.
// A deferred tile gets its offset from the escape bytes of the tiles before it in its group and
// the sums of the groups before, in one round of loads that every lane issues at once (every
// tile has counted, so nothing waits; a look-back here walked through the aggregates of
// deferred tiles, ~32 round trips for the last of 2048), moves its escape chunks from temp into
// the message and adds the offset to its block entries (a reduction, not a read). Its state
// word stays as the encode kernel left it: the later tiles of the group read its own count, and
// the finisher takes the item's total from the group sums. 256 MiB: 8.3 us; a CTA per tile
// storing 8 bytes per thread bytewise took 13 us.
#pragma once

#include <cstdint>
#include <cstring>

#include "cta.cuh"
#include "encode_lookback.cuh"
#include "encode_plan.cuh"
#include "launch.cuh"
#include "tiling.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

constexpr int kFixupWarps = 8;
static_assert(kEscScratch % 128 == 0 && kGroupTiles % 32 == 0,
              "a slot's words and a group's state words spread evenly over the lanes");

// This warp's tile, where deferred: its escape chunks placed, its block entries offset.
template <int MU>
__device__ __forceinline__ void place_deferred_tile(const Launch& P) {
  const uint32_t tile = blockIdx.x * kFixupWarps + threadIdx.x / 32, lane = threadIdx.x & 31;
  const int item = find_item(P, tile);
  const LaunchItem& it = P.items[item];
  const uint32_t u = tile - it.tile0;
  if (u >= it.tiles) return;  // past the launch's last tile
  const unsigned long long* st = P.state + it.tile0;
  // The slot's words, word 32 i + lane in w[i], so that each store below covers 128 contiguous
  // bytes (32 bytes per lane stored bytewise touched 32 sectors per store: 42 us at 256 MiB).
  uint32_t* slot = reinterpret_cast<uint32_t*>(P.scratch + uint64_t(tile) * kEscScratch) + lane;
  const unsigned long long s = st[u];
  uint32_t w[kEscScratch / 128 + 1];
#pragma unroll
  for (uint32_t i = 0; i < kEscScratch / 128; ++i) w[i] = slot[32 * i];  // zero past the chunk
  w[kEscScratch / 128] = 0;
  const uint32_t g = u / kGroupTiles;
  uint32_t before = 0;
#pragma unroll
  for (uint32_t j = 0; j < kGroupTiles / 32; ++j) {
    const uint32_t t = g * kGroupTiles + 32 * j + lane;
    if (t < u) before += own_escapes(st[t]);
  }
  const uint32_t* group = P.group_esc + group_slot(it.tile0, item, 0);
  for (uint32_t j = lane; j < g; j += 32) before += group[j];
  const Plan p = finished_plan(P, item);  // an auto item's codec: a load, issued with the others
  if (!(s & kDeferred)) return;           // the same word in every lane: the warp leaves together
  const uint32_t chunk = own_escapes(s);
  const uint64_t excl = warp_sum(before);  // an item's escape bytes fit 32 bits
  // A message over its limit becomes Raw (encode_finish_kernel): nothing to place then. The
  // scratch bytes are cleared either way, as temp is left zeroed.
  const bool place = p.L.off_esc + excl + chunk <= min(it.limit, it.cap);
#pragma unroll
  for (uint32_t i = 0; i < kEscScratch / 128; ++i)
    if (4 * (32 * i + lane) < chunk) slot[32 * i] = 0;
  if (place) {
    // Aligned words q of the destination hold chunk bytes 4q - a .. 4q - a + 3 (a: the chunk's
    // misalignment), from slot words q - 1 and q; the first and last may hold bytes of the
    // neighbouring tiles' chunks, placed by other warps, and are written bytewise.
    uint8_t* const dst = it.out + p.L.off_esc + excl;
    const uint32_t a = reinterpret_cast<uintptr_t>(dst) & 3, end = a + chunk;
    uint8_t* const aligned = dst - a;
#pragma unroll
    for (uint32_t i = 0; i <= kEscScratch / 128; ++i) {
      const uint32_t carry = __shfl_sync(~0u, i ? w[i - 1] : 0, 31);
      uint32_t prev = __shfl_up_sync(~0u, w[i], 1);
      if (lane == 0) prev = carry;
      const uint32_t v = __funnelshift_l(prev, w[i], 8 * a);
      const uint32_t lo = 4 * (32 * i + lane);
      if (lo >= a && lo + 4 <= end) {
        *reinterpret_cast<uint32_t*>(aligned + lo) = v;
      } else if (lo < end) {
        for (uint32_t k = 0; k < 4; ++k)
          if (lo + k >= a && lo + k < end) aligned[lo + k] = static_cast<uint8_t>(v >> (8 * k));
      }
    }
  }
  // Lane m: the entry of the tile's block m (BlockEntry::esc_offset first; in bounds of the
  // output, as the tile is deferred, so its item is coded).
  const uint32_t b = u * tile_blocks<MU>(p.c) + lane;
  if (place && lane < tile_blocks<MU>(p.c) && b < p.L.n_blocks) {
    uint8_t* entry = it.out + p.L.off_table + uint64_t(b) * kBlockEntryBytes;
    if ((reinterpret_cast<uintptr_t>(entry) & 3) == 0) {
      atomicAdd(reinterpret_cast<uint32_t*>(entry), static_cast<uint32_t>(excl));
    } else {
      uint32_t off;
      memcpy(&off, entry, sizeof off);
      off += static_cast<uint32_t>(excl);
      memcpy(entry, &off, sizeof off);
    }
  }
}

}  // namespace
}  // namespace zipccl::gpu::detail
