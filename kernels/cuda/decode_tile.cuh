// The decoder's work on one tile: check its blocks' entries, stage their sections (cp.async or
// the bulk copy engine) and short escape chunks in shared memory, verify the escape counts and
// write the decoded elements.
#pragma once

#include <cstdint>
#include <cstring>

#include "async_copy.cuh"
#include "cta.cuh"
#include "decode_check.cuh"
#include "decode_shared.cuh"
#include "launch.cuh"
#include "lanes.h"
#include "swizzle.h"
#include "tiling.cuh"
#include "trace.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

// Copy the K bit-plane slices of block m (bytes ceil(nb/8) each) to the staging area: a full
// block's K x 32 16-byte chunks in one step of the CTA.
template <uint32_t K, int M>
__device__ __forceinline__ void stage_planes(uint4* data, uint32_t planes0, int m, const uint8_t* src,
                                             uint64_t bit_stride, uint32_t nb, bool vec) {
  constexpr uint32_t kPlaneChunks = kBlockElems / 8 / 16;
  if (vec && nb == kBlockElems) {
    const uint32_t k = threadIdx.x / kPlaneChunks, c = threadIdx.x % kPlaneChunks;
    if (k < K) cp_async16(data + swz(planes0 + (k * M + m) * kPlaneChunks + c), src + k * bit_stride + 16 * c);
  } else {
    for (uint32_t k = 0; k < K; ++k)
      stage(data, planes0 + (k * M + m) * kPlaneChunks, src + k * bit_stride, (nb + 7) / 8, vec);
  }
}

// Escape chunks that bulk_stage() stages too: block m's 16-byte aligned cover src[m], len[m]
// bytes (a multiple of 16; 0: none), to dst + m * kEscStage.
struct EscCopies {
  const uint8_t* src[kMaxUnitBlocks];
  uint32_t len[kMaxUnitBlocks];
  uint8_t* dst;
};

// One thread: stage the planes (bit m of `planes`) and residuals (bit m of `res`) of whole blocks
// m of a tile by the bulk copy engine, into linear slots: copy group 0 (mbar[0]) every block's
// planes and block 0's residuals, group m block m's residuals (and its escape chunk, `esc`).
// Every barrier completes a phase per bulk tile (`tiles` counts them), those of no group at once,
// so that all wait for the same parity. planes0 / res0: block 0's first plane and residual bytes.
// (Inlined: as a call, it made decode_unit()'s live values go through local memory, 128 bytes of
// spill stores in the bulk kernel against 36, ptxas -v.)
template <Codec C, int M>
__device__ __forceinline__ void bulk_stage(const uint8_t* planes0, uint64_t bit_stride, const uint8_t* res0,
                                        uint64_t res_stride, uint32_t planes, uint32_t res, uint4* data,
                                        uint64_t* mbar, uint32_t& tiles, const EscCopies* esc = nullptr) {
  using G = Geom<C>;
  constexpr uint32_t kResChunks = kBlockElems / 16, kPlaneChunks = kBlockElems / 8 / 16;
  constexpr uint32_t kPlanes0 = G::R * M * kResChunks, kPlaneBytes = kBlockElems / 8;
  fence_proxy_async_shared();
#pragma unroll
  for (int m = 0; m < kMaxUnitBlocks; ++m)
    mbar_expect(&mbar[m], m >= M ? 0
                                 : ((res >> m) & 1) * G::R * kBlockElems +
                                       (m == 0) * __popc(planes) * G::K * kPlaneBytes + (esc ? esc->len[m] : 0));
  ++tiles;
  // A plane's slices of consecutive blocks are consecutive on both sides: one copy per plane
  // when every block's are staged.
  const bool all = planes == (1u << M) - 1;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (all ? m == 0 : (planes >> m) & 1)
      for (uint32_t k = 0; k < G::K; ++k)
        bulk_copy(data + kPlanes0 + (k * M + m) * kPlaneChunks, planes0 + m * kPlaneBytes + k * bit_stride,
                  all ? M * kPlaneBytes : kPlaneBytes, &mbar[0]);
    if ((res >> m) & 1)
      for (uint32_t r = 0; r < G::R; ++r)
        bulk_copy(data + (r * M + m) * kResChunks, res0 + m * kBlockElems + r * res_stride, kBlockElems, &mbar[m]);
    if (esc && esc->len[m]) bulk_copy(esc->dst + m * kEscStage, esc->src[m], esc->len[m], &mbar[m]);
  }
}

// Where block b0 + m's first plane and first residual bytes lie in a message of layout L, and
// the bytes its K planes / R residual planes span from there: the bulk copy engine stages a whole
// block's sections only where the span lies within the bytes received.
__device__ __forceinline__ uint64_t planes_at(const Layout& L, uint32_t b0, int m) {
  return L.off_bits + (uint64_t(b0) * kBlockElems + m * kBlockElems) / 8;
}
__device__ __forceinline__ uint64_t res_at(const Layout& L, uint32_t b0, int m) {
  return L.off_res + uint64_t(b0) * kBlockElems + m * kBlockElems;
}
template <Codec C>
__device__ __forceinline__ uint64_t planes_span(const Layout& L) {
  return (Geom<C>::K - 1) * L.bit_stride + kBlockElems / 8;
}
template <Codec C>
__device__ __forceinline__ uint64_t res_span(const Layout& L) {
  return (Geom<C>::R - 1) * L.res_stride + kBlockElems;
}

// The 16-byte aligned cover of an escape chunk of `count` bytes at message offset off: its start
// and length. A tile staged in bulk stages a coded block's cover that fits its slot and the bytes
// received.
__device__ __forceinline__ uint64_t cover_at(uint64_t off) { return off & ~uint64_t(15); }
__device__ __forceinline__ uint32_t cover_len(uint64_t off, uint16_t count) { return ((off & 15) + count + 15) & ~15u; }

// Decode one tile: blocks u*M .. u*M+M-1 of a message whose header claims codec C. Residual
// and bit-plane bytes of all M blocks are staged in shared memory with asynchronous copies (or
// the bulk copy engine, bulk_stage()), all in flight together, from the header's claimed layout
// while the checker tile checks it (nothing is used unless the check passes): the first copy
// group holds every block's planes and block 0's residuals, so that one scan gives the escape
// counts and positions of all blocks; group m > 0 holds block m's residuals. Short escape chunks
// are staged too (bytes within the checked chunk bounds, used only once the block's code-0
// count equals its chunk length). `prestaged`: stage_ahead() staged the tile in data (its copies
// have landed).
template <Codec C, int MU>
__device__ __forceinline__ void decode_unit(const Launch& P, int item, const LaunchItem& it, uint32_t u,
                                            DecShared& sh, uint4* data, bool prestaged = false) {
  using G = Geom<C>;
  constexpr int M = unit_blocks<C, MU>();
  static_assert(M <= kMaxUnitBlocks && M <= MU, "shared arrays, copy-group waits and escape staging");
  constexpr uint32_t kResChunks = kBlockElems / 16, kPlaneChunks = kBlockElems / 8 / 16;
  constexpr uint32_t kPlanes0 = G::R * M * kResChunks;  // first chunk of the staged planes
  static_assert(16 * (kPlanes0 + G::K * M * kPlaneChunks) <= decode_sections_bytes<MU>(), "staging fits");
  static_assert(kResChunks % 32 == 0 && kPlaneChunks % 32 == 0 && kPlanes0 % 32 == 0, "swz() of section offsets");
  const BlockEntry* ent = sh.entry[M == MU ? 0 : 1];
  uint8_t* esc_staged = reinterpret_cast<uint8_t*>(data) + decode_sections_bytes<MU>();
  const uint8_t* msg = it.in;
  const uint32_t b0 = u * M;
  const uint32_t e0 = threadIdx.x * kPerThread;
  const bool in_vec = (reinterpret_cast<uintptr_t>(msg) & 15) == 0;
  const bool out_vec = (reinterpret_cast<uintptr_t>(it.out) & 15) == 0;
  const uint64_t esc_bytes = sh.header.esc_bytes;
  const Layout L = claimed_layout<C>(sh.header);
  const auto plausible = [&] { return claimed_layout_in_bounds(sh.header, G::EB, it.bytes, it.cap); };
  // Whether [off, off + len) lies within the bytes received (off and len from plausible fields).
  auto fits = [&](uint64_t off, uint64_t len) { return off + len <= it.bytes; };
  const auto planes_src = [&](int m) { return planes_at(L, b0, m); };
  const auto res_src = [&](int m) { return res_at(L, b0, m); };

  uint32_t nb[M], valid[M];
  bool ok[M];  // the block passed decode.cc's entry checks (plan() reports the failures)
  bool bulk = false;
  // The entry checks of decode.cc, in its order, and whether the bulk copy engine stages the
  // tile: on sm_90 in bulk launches, when every block to stage is whole and the message 16-byte
  // aligned (one instruction per plane and residual section of a block, into linear slots,
  // instead of a cp.async per thread and 16 bytes, whose issue the memory pipeline throttled).
  auto plan = [&] {
    bool tiling = true;  // the last block's chunk ends at esc_bytes
#pragma unroll
    for (int m = 0; m < M; ++m) {
      nb[m] = b0 + m < L.n_blocks ? block_elems(L, b0 + m) : 0;
      valid[m] = nb[m] > e0 ? min(nb[m] - e0, uint32_t(kPerThread)) : 0;
      const BlockEntry& e = ent[m + 1];
      const uint64_t expect = b0 + m == 0 ? 0 : uint64_t(ent[m].esc_offset) + ent[m].esc_count;
      Status s = Status::kOk;
      if (e.esc_offset != expect || expect + e.esc_count > esc_bytes)
        s = Status::kBadBlock;
      else if (e.mode == kBlockRaw && (e.base != 0 || e.esc_count != raw_chunk_bytes(L, nb[m])))
        s = Status::kBadBlock;
      else if (e.mode != kBlockRaw && (e.mode != kBlockCoded || e.base + kWindow - 1 > G::kExpMax))
        s = Status::kBadBlock;
      ok[m] = nb[m] && s == Status::kOk;
      if (threadIdx.x == 0 && nb[m] && s != Status::kOk) report(P, item, b0 + m + 1, s);
      if (b0 + m == L.n_blocks - 1 && uint64_t(e.esc_offset) + e.esc_count != esc_bytes) tiling = false;
    }
    if (threadIdx.x == 0 && !tiling) report(P, item, L.n_blocks + 1, Status::kBadBlock);
    if constexpr (MU > 1 && has_bulk_copy()) {
      bulk = in_vec;
#pragma unroll
      for (int m = 0; m < M; ++m) bulk &= !ok[m] || nb[m] == kBlockElems;
    }
  };
  // Thread 0 of a bulk tile: its checked blocks' planes and residuals by the copy engine. (Block
  // m's are staged as the cp.async path below decides with nb[m], here kBlockElems; one predicate
  // shared by both made the small-launch decoder 0.3-0.4 us slower per message.)
  const auto bulk_copies = [&] {
    uint32_t planes = 0, res = 0;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      planes |= uint32_t(ok[m] && fits(planes_src(m), planes_span<C>(L))) << m;
      res |= uint32_t(ok[m] && fits(res_src(m), res_span<C>(L))) << m;
    }
    bulk_stage<C, M>(msg + planes_src(0), L.bit_stride, msg + res_src(0), L.res_stride, planes, res, data, sh.mbar,
                     sh.bulk_tiles);
  };
  // Short escape chunks are staged in shared memory, bit m of esc_slots for block m's: chunks of
  // up to kEscStage bytes, at the start of the block's slot; in tiles that warp 0 stages, the
  // 16-byte aligned cover of the chunk, when that fits the slot and the bytes received (the
  // chunk then starts at its offset's low four bits).
  const auto esc_off = [&](int m) { return L.off_esc + ent[m + 1].esc_offset; };
  uint32_t esc_slots = 0;

  // bf16 bulk launches on sm_90: warp 0 alone checks the tile and has it staged (thread 0 by the
  // bulk copy engine, its lanes the escape chunks by 16-byte loads) while the other warps wait
  // at the barrier that precedes the decoding anyway, and tells them what it found (sh.plan:
  // the layout is plausible, the tile staged in bulk, which blocks passed, which escape chunks
  // are in their slots): the checks cost one warp's instructions instead of every warp's (a
  // fifth of the kernel's). Tiles it cannot stage in bulk are staged by every warp's
  // asynchronous copies. fp16 and fp32 tiles keep every warp checking: fp16 decode was 7% slower
  // this way (64 and 256 MiB) with a fifth fewer instructions, fp32 within 1%. A tile staged ahead
  // (whole blocks, aligned: a bulk tile) is checked alike and staged no more.
  constexpr bool kLead = MU > 1 && has_bulk_copy() && C == Codec::BF16;
  bool staged_by_lead = false;
  if constexpr (kLead) {
    if (threadIdx.x < 32) {
      uint32_t word = plausible();
      if (word) {
        plan();
        if (bulk) {
          word |= 2;
          if (threadIdx.x == 0 && !prestaged) bulk_copies();
          // Lane j: 16-byte piece j of the aligned covers. (Issued before the copy engine's
          // instructions, these loads made bf16 256 MiB decode 1% slower.)
          uint4 x[M];
#pragma unroll
          for (int m = 0; m < M; ++m) {
            const BlockEntry& e = ent[m + 1];
            const uint64_t a = cover_at(esc_off(m));
            const uint32_t cover = cover_len(esc_off(m), e.esc_count);
            const bool in_slot = ok[m] && e.mode == kBlockCoded && cover <= kEscStage && fits(a, cover);
            word |= uint32_t(in_slot) << (8 + m);
            x[m] = in_slot && !prestaged && 16 * threadIdx.x < cover
                       ? reinterpret_cast<const uint4*>(msg + a)[threadIdx.x]
                       : make_uint4(0, 0, 0, 0);
          }
          if (!prestaged)
#pragma unroll
            for (int m = 0; m < M; ++m) reinterpret_cast<uint4*>(esc_staged + m * kEscStage)[threadIdx.x] = x[m];
        }
#pragma unroll
        for (int m = 0; m < M; ++m) word |= uint32_t(ok[m]) << (4 + m);
      }
      if (threadIdx.x == 0) sh.plan = word;
      ZIPCCL_MARK(2);
    }
    __syncthreads();  // also orders thread 0's barrier set-up before the waits
    const uint32_t word = sh.plan;
    if (!(word & 1)) return;
    staged_by_lead = bulk = word & 2;
    esc_slots = word >> 8;
#pragma unroll
    for (int m = 0; m < M; ++m) {  // (only checked blocks are used; in bulk tiles they are whole)
      ok[m] = (word >> (4 + m)) & 1;
      nb[m] = !ok[m] ? 0 : bulk ? kBlockElems : block_elems(L, b0 + m);
      valid[m] = nb[m] > e0 ? min(nb[m] - e0, uint32_t(kPerThread)) : 0;
    }
  } else {
    if (!plausible()) return;
    plan();
  }
  if (!staged_by_lead) {
    if (bulk) {
      if (threadIdx.x == 0) bulk_copies();
    } else {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        if (m == 0)
#pragma unroll
          for (int mm = 0; mm < M; ++mm)
            if (ok[mm]) {
              const uint64_t off = planes_src(mm);
              if (fits(off, (G::K - 1) * L.bit_stride + (nb[mm] + 7) / 8))
                stage_planes<G::K, M>(data, kPlanes0, mm, msg + off, L.bit_stride, nb[mm], in_vec);
            }
        const uint64_t off = res_src(m);
        if (ok[m] && fits(off, (G::R - 1) * L.res_stride + nb[m]))
          for (uint32_t r = 0; r < G::R; ++r) {
            if (in_vec && nb[m] == kBlockElems)
              stage_rounds(data, (r * M + m) * kResChunks, msg + off + r * L.res_stride, kBlockElems / 4096);
            else
              stage(data, (r * M + m) * kResChunks, msg + off + r * L.res_stride, nb[m], in_vec);
          }
        cp_async_commit();
      }
    }
    ZIPCCL_MARK(2);
    // Short escape chunks: every load is issued before the first store waits for one. (A checked
    // block's chunk lies within the bytes received: its entry keeps it within esc_bytes, the
    // plausible layout the escape section within the message.)
    constexpr uint32_t kJ = kEscStage / kThreads;
    uint8_t x[M][kJ];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const BlockEntry& e = ent[m + 1];
      const bool staged = ok[m] && e.mode == kBlockCoded && e.esc_count <= kEscStage;
      esc_slots |= uint32_t(staged) << m;
#pragma unroll
      for (uint32_t j = 0; j < kJ; ++j) {
        const uint32_t i = threadIdx.x + j * kThreads;
        x[m][j] = staged && i < e.esc_count ? msg[esc_off(m) + i] : 0;
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (uint32_t j = 0; j < kJ; ++j) esc_staged[m * kEscStage + threadIdx.x + j * kThreads] = x[m][j];
    cp_async_wait(M - 1);
    __syncthreads();
  }
  ZIPCCL_MARK(3);
  // This thread's residual bytes and plane bytes of block m, at swizzled slots unless the bulk
  // copy engine staged them. (Section bases are multiples of 32 chunks: see swz().)
  const auto slot = [&](uint32_t c) { return bulk ? c : swz(c); };
  const uint4* res_at = data + slot(threadIdx.x);
  const uint16_t* plane_at = reinterpret_cast<const uint16_t*>(data + kPlanes0 + slot(threadIdx.x / 8)) + threadIdx.x % 8;
  auto res_of = [&](int m, uint32_t r) { return res_at[(r * M + m) * kResChunks]; };
  auto plane_of = [&](int m, uint32_t k) { return uint32_t(plane_at[(k * M + m) * kPlaneChunks * 8]); };
  auto plane_byte = [&](int m, uint32_t k, uint32_t i) {
    return reinterpret_cast<const uint8_t*>(data + slot(kPlanes0 + (k * M + m) * kPlaneChunks + i / 16))[i % 16];
  };

  const uint32_t parity = (sh.bulk_tiles - 1) & 1;  // (read only in bulk tiles)
  if (bulk && !prestaged) mbar_wait(&sh.mbar[0], parity);
  ZIPCCL_MARK(4);
  // Each coded block's code-0 count must equal its chunk length before a chunk byte is used.
  uint32_t esc[M], escapes[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    esc[m] = 0;
    if (ok[m] && ent[m + 1].mode == kBlockCoded) {
      const uint32_t coded = plane_of(m, 0) | plane_of(m, 1) | plane_of(m, 2);
      esc[m] = __popc(~coded & ((1u << valid[m]) - 1));
    }
  }
  cta_scans<M>(esc, escapes, sh.scan);  // esc[m] becomes this thread's first escape of block m
  ZIPCCL_MARK(5);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (m > 0 && bulk) {
      if (!prestaged) mbar_wait(&sh.mbar[m], parity);
    } else if (m > 0) {
      cp_async_wait(M - 1 - m);
      __syncthreads();
    }
    if (!ok[m]) continue;
    const BlockEntry& e = ent[m + 1];
    if (e.mode == kBlockCoded && escapes[m] != e.esc_count) {
      if (threadIdx.x == 0) report(P, item, b0 + m + 1, Status::kBadEscapes);
      continue;
    }
    const uint8_t* chunk = (esc_slots >> m) & 1 ? esc_staged + m * kEscStage + (staged_by_lead ? esc_off(m) & 15 : 0)
                                                : msg + esc_off(m);
    if constexpr (C != Codec::FP32) {
      if (e.mode == kBlockCoded && out_vec && valid[m] == kPerThread) {
        uint32_t pb[G::K], out[8];
#pragma unroll
        for (uint32_t k = 0; k < G::K; ++k) pb[k] = plane_of(m, k);
        const uint4 r = res_of(m, 0);
        const uint32_t r4[4] = {r.x, r.y, r.z, r.w};
        if (!lanes::decode16<C>(pb, r4, e.base, chunk, esc[m], sh.patch[threadIdx.x], out))
          report(P, item, b0 + m + 1, Status::kBadEscapes);
        uint4* dst = reinterpret_cast<uint4*>(it.out + ((uint64_t(b0) + m) * kBlockElems + e0) * G::EB);
        dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
        dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
        continue;
      }
    }
    uint8_t res[G::R][kPerThread];
#pragma unroll
    for (uint32_t r = 0; r < G::R; ++r) {
      const uint4 x = res_of(m, r);
      memcpy(res[r], &x, 16);
    }
    uint32_t v[kPerThread];
    if (e.mode == kBlockRaw) {
      const uint32_t groups = (nb[m] + 7) / 8, in_planes = raw_plane_bytes(L, nb[m]);
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const uint32_t i = e0 + j;
        uint32_t top = 0;
        if (uint32_t(j) < valid[m])
          top = i < in_planes ? plane_byte(m, i / groups, i % groups) : chunk[i - in_planes];
        uint8_t rb[3];
#pragma unroll
        for (uint32_t r = 0; r < G::R; ++r) rb[r] = res[r][j];
        v[j] = elem_join_top(C, top, rb);
      }
    } else {
      uint32_t pb[G::K];
#pragma unroll
      for (uint32_t k = 0; k < G::K; ++k) pb[k] = plane_of(m, k);
      uint32_t k_esc = esc[m];
      bool bad = false;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        uint32_t sym = 0;
#pragma unroll
        for (uint32_t k = 0; k < G::K; ++k) sym |= ((pb[k] >> j) & 1u) << k;
        uint32_t exp = e.base + (sym & 7) - 1;
        if (uint32_t(j) < valid[m] && (sym & 7) == 0) {
          exp = chunk[k_esc++];
          bad |= exp > G::kExpMax;
        }
        uint8_t rb[3];
#pragma unroll
        for (uint32_t r = 0; r < G::R; ++r) rb[r] = res[r][j];
        v[j] = elem_join(C, exp, rb, sym >> 3);
      }
      if (bad) report(P, item, b0 + m + 1, Status::kBadEscapes);
    }
    uint8_t* dst = it.out + ((uint64_t(b0) + m) * kBlockElems + e0) * G::EB;
    if (out_vec && valid[m] == kPerThread) {
#pragma unroll
      for (int q = 0; q < int(kPerThread * G::EB / 16); ++q) {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (G::EB == 4)
            w[i] = v[q * 4 + i];
          else
            w[i] = v[q * 8 + 2 * i] | v[q * 8 + 2 * i + 1] << 16;
        }
        reinterpret_cast<uint4*>(dst)[q] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kPerThread; ++j)
        if (uint32_t(j) < valid[m])
          for (uint32_t i = 0; i < G::EB; ++i) dst[j * G::EB + i] = static_cast<uint8_t>(v[j] >> (8 * i));
    }
  }
}

// Warp 1: stage decode tile b of `it` ahead into `data` (DecAhead), when the bulk copy engine can
// and decode_unit() would take it as a bulk tile: a data tile (not the checker) of a 16-byte
// aligned message whose header claims bf16 and a plausible layout, every block whole. The header
// and the tile's entries come in one round trip; lane 0 then stages, from them as read, what
// decode_unit()'s warp 0 would (planes, residuals, and each coded block's escape chunk cover up
// to kEscStage bytes, all within the bytes received). Entries are not checked here: the tile
// checks them before it uses a byte. Returns whether it staged.
template <int MU>
__device__ __forceinline__ bool stage_ahead(const LaunchItem& it, uint32_t b, DecAhead& ah, uint4* data,
                                            uint32_t lane) {
  if constexpr (!has_bulk_copy()) {
    return false;
  } else {
    using G = Geom<Codec::BF16>;
    constexpr int M = unit_blocks<Codec::BF16, MU>();
    constexpr uint32_t kPieces = kHeaderBytes / 16;
    const uint8_t* msg = it.in;
    if ((reinterpret_cast<uintptr_t>(msg) & 15) != 0 || it.bytes < kHeaderBytes || b + 1 >= it.tiles) return false;
    const uint32_t b0 = b * M;
    if (lane < kPieces) {
      reinterpret_cast<uint4*>(&ah.header)[lane] = reinterpret_cast<const uint4*>(msg)[lane];
    } else if (lane <= kPieces + M) {  // entry[m]: block b0 - 1 + m's
      const int64_t blk = int64_t(b0) - 1 + (lane - kPieces);
      BlockEntry e{};
      if (blk >= 0 && kHeaderBytes + uint64_t(blk + 1) * kBlockEntryBytes <= it.bytes)
        e = load_entry(msg + kHeaderBytes + uint64_t(blk) * kBlockEntryBytes);
      ah.entry[lane - kPieces] = e;
    }
    __syncwarp();
    const Header& h = ah.header;
    if (h.codec != static_cast<uint8_t>(Codec::BF16) || !claimed_layout_in_bounds(h, G::EB, it.bytes, it.cap) ||
        b0 + M > h.n_blocks || uint64_t(b0 + M) * kBlockElems > h.n_elems)
      return false;
    if (lane == 0) {
      const Layout L = claimed_layout<Codec::BF16>(h);
      const uint64_t planes0 = planes_at(L, b0, 0), res0 = res_at(L, b0, 0);
      uint32_t planes = 0, res = 0;
      EscCopies esc;
      esc.dst = reinterpret_cast<uint8_t*>(data) + decode_sections_bytes<MU>();
#pragma unroll
      for (int m = 0; m < M; ++m) {
        planes |= uint32_t(planes_at(L, b0, m) + planes_span<Codec::BF16>(L) <= it.bytes) << m;
        res |= uint32_t(res_at(L, b0, m) + res_span<Codec::BF16>(L) <= it.bytes) << m;
        const BlockEntry& e = ah.entry[m + 1];
        const uint64_t off = L.off_esc + e.esc_offset, a = cover_at(off);
        const uint32_t cover = cover_len(off, e.esc_count);
        esc.src[m] = msg + a;
        esc.len[m] = e.mode == kBlockCoded && cover <= kEscStage && a + cover <= it.bytes ? cover : 0;
      }
      bulk_stage<Codec::BF16, M>(msg + planes0, L.bit_stride, msg + res0, L.res_stride, planes, res, data, ah.mbar,
                                 ah.tiles, &esc);
    }
    return true;
  }
}

}  // namespace
}  // namespace zipccl::gpu::detail
