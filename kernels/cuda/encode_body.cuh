// What an encode does per tile: stage, classify (auto), plan, code, and finish the item from its
// last tile. encode.cu's kernels launch it one CTA per tile; the resident codec (resident.cu)
// runs it on each tile a CTA of its claims. The shared memory and helpers here are per
// translation unit (unnamed namespace): each .cu that includes this has its own.
#pragma once

#include <cstdint>
#include <type_traits>

#include "encode_classify.cuh"
#include "encode_finish.cuh"
#include "encode_plan.cuh"
#include "encode_shared.cuh"
#include "encode_tile.cuh"
#include "launch.cuh"
#include "tiling.cuh"
#include "trace.cuh"

namespace zipccl::gpu::detail {
namespace {

// The slice of a Raw message's payload that tile b copies.
__device__ __forceinline__ void raw_slice(const LaunchItem& it, uint32_t b, uint64_t* lo, uint64_t* len) {
  const uint64_t span = ((it.bytes + it.tiles - 1) / it.tiles + 15) & ~uint64_t(15);
  *lo = min(uint64_t(b) * span, it.bytes);
  *len = min(span, it.bytes - *lo);
}

// The encode kernel's shared memory at namespace scope, so that encode_unit_apart() reaches it
// as shared memory (through a parameter it would be a generic pointer).
__shared__ EncShared g_sh;
// The tile's input, 16-byte chunks at swz() slots. 128-byte aligned: after the static shared
// memory it began 112 bytes past a 128-byte boundary, and bulk encode was 8% slower (measured;
// the swizzle's bank spread is the same at any 16-byte offset, so the cost lies elsewhere,
// perhaps in cp.async writes that straddle 128-byte rows).
extern __shared__ __align__(128) uint4 g_staged[];

// encode_unit() as a call, for fp16 and fp32 in the generic kernel (auto and mixed batches):
// inlined, their paths shared the kernel's register allocation with the bf16 path, which
// spilled. Apart: bf16 auto +7%, fp16 auto -5%, fp32 auto -1% (bulk), bf16 being the common
// case of the plugin; apart fp32 alone lost on all three.
template <Codec C, int MU, typename Next>
__device__ __noinline__ void encode_unit_apart(const LaunchItem& it, unsigned long long* st, uint8_t* scratch,
                                               uint32_t* group, uint32_t u, uint32_t buf, bool staged, bool header,
                                               Next next) {
  encode_unit<C, MU, 16>(it, st, scratch, group, g_sh.plan.L, u, g_sh, g_staged + buf, staged, header, next);
}

// FIXED: the codec of every item of the launch when the host knows it (all items coded with one
// codec, none auto), else kAnyCodec. A kernel for one codec carries only its coding path - a
// third of the mixed kernel's code, whose instruction fetch stalls were 15% of its stall
// samples - and holds no codec in a register.
constexpr int kAnyCodec = -1;

// Elements per thread and block: 32 (128 threads per CTA) in the bulk kernels for a known
// codec, whose per-thread and per-warp work of a tile (waits, barriers, scans, addresses,
// escape loops) then serves twice the elements; else 16 (256 threads). The generic kernel (auto
// and mixed batches) at 128 threads was slower: auto bf16 -2 to -5%, fp16 -5%, fp32 -6%.
constexpr int encode_pt(int MU, int fixed) { return MU > 1 && fixed != kAnyCodec ? 32 : 16; }
constexpr int encode_threads(int MU, int fixed) { return kBlockElems / encode_pt(MU, fixed); }

// One tile (CTA) of item `item`: tile b of it. What encode_kernel runs per CTA, and the
// resident codec per tile it claims (resident.cu). FINISH: the item's last tile completes it
// (small launches and the resident codec; bulk launches leave it to encode_finish_kernel).
// buf: the chunk of g_staged where the tile is staged, already (`prestaged`, its copy groups the
// only ones in flight) or here; next: the tile to stage after it (tiling.cuh's NoNext).
template <int MU, int FIXED, bool FINISH = MU == 1, typename Next = NoNext>
__device__ __forceinline__ void encode_tile(const Launch& P, int item, uint32_t b, uint32_t buf = 0,
                                            bool prestaged = false, Next next = {}) {
  constexpr int PT = encode_pt(MU, FIXED), NT = kBlockElems / PT;
  static_assert(FIXED != kAnyCodec || NT == kThreads, "the classifier and encode_unit_apart() use 256 threads");
  // Every codec's tile is staged alike, so a tile staged before its codec is known never restages.
  static_assert(!Next::kStages || unit_blocks<Codec::FP32, MU>() * 2 == MU, "no restaging");
  EncShared& sh = g_sh;
  uint4* const staged = g_staged + buf;
  const LaunchItem& it = P.items[item];
  unsigned long long* st = P.state + it.tile0;
  // The tile's input is requested first, so that the codec choice and the plan overlap with
  // the loads. An auto item is staged as bf16/fp16 tiles it, which is how fp32 tiles it too
  // except in 8 KiB tiles (MU = 1), where an fp32 tile restages.
  // Neither the guess nor the codec is kept in a register across the barrier (at 40 registers
  // ptxas spilled the codec, and its reload from local memory stalled every warp after it).
  constexpr bool fixed = FIXED != kAnyCodec;
  {
    const Codec guess = fixed ? static_cast<Codec>(FIXED) : it.auto_codec ? Codec::BF16 : static_cast<Codec>(it.codec);
    if (guess != Codec::Raw && !prestaged) stage_tile<MU, NT>(it, guess, b, staged);
    const Codec c = !fixed && it.auto_codec ? item_codec(P, item, b, sh) : guess;
    if (threadIdx.x == 0) sh.plan = make_plan(it, c);
  }
  __syncthreads();
  ZIPCCL_MARK(1);
  const Plan& p = sh.plan;
  const Codec c = fixed ? static_cast<Codec>(FIXED) : p.c;
  if (p.raw && !p.too_large) {
    if (!P.raw_header_only && it.cap >= kHeaderBytes + it.bytes) {
      uint64_t lo, len;
      raw_slice(it, b, &lo, &len);
      cta_copy<NT>(it.out + kHeaderBytes + lo, it.in + lo, len);
    }
  } else if (!p.too_large &&
             b * uint64_t(tile_blocks<MU>(c)) < p.L.n_blocks) {
    // Staged as guessed: as c tiles it (c is not Raw here), or as bf16 tiles it for an auto item.
    const bool as_staged = fixed || !it.auto_codec || unit_bytes<MU>(Codec::BF16) == unit_bytes<MU>(c);
    if (!as_staged) {  // the copies in flight must land before restaging
      cp_async_wait(0);
      __syncthreads();
    }
    uint32_t* const group = P.group_esc ? P.group_esc + group_slot(it.tile0, item, b) : nullptr;
    const auto unit = [&](auto codec) {
      constexpr Codec C = decltype(codec)::value;
      if constexpr (fixed || C == Codec::BF16)
        encode_unit<C, MU, PT>(it, st, P.scratch, group, p.L, b, sh, staged, as_staged, !P.checksum, next);
      else
        encode_unit_apart<C, MU>(it, st, P.scratch, group, b, buf, as_staged, !P.checksum, next);
    };
    if constexpr (fixed) {
      unit(std::integral_constant<Codec, static_cast<Codec>(FIXED)>());
    } else {
      switch (c) {
        case Codec::BF16: unit(std::integral_constant<Codec, Codec::BF16>()); break;
        case Codec::FP16: unit(std::integral_constant<Codec, Codec::FP16>()); break;
        default: unit(std::integral_constant<Codec, Codec::FP32>()); break;
      }
    }
  }
  // No copy of this tile may land in shared memory after it; the next tile's may (warp 1's).
  cp_async_wait(Next::kStages && threadIdx.x / 32 == 1 && next.staged() ? MU : 0);
  ZIPCCL_MARK(8);
  // Slot 9 follows slot 8 at once where a finish kernel completes the item.
  bool last = false;
  if (FINISH) last = finish_tile(P, item, &sh.flag);
  ZIPCCL_MARK(9);
  if (last) finalize<MU>(P, item, p, st, sh);
}

}  // namespace
}  // namespace zipccl::gpu::detail
