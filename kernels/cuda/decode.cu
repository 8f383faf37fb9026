// GPU decoder: one CTA per tile of 1 or 2 blocks (common.cuh), and one more per item that
// checks its header. The input is untrusted and is validated with the CPU decoder's checks
// (header.cc, decode.cc): the header against the layout it implies (by the checker CTA), each
// block's entry, the tiling of the escape section (entry b must start where entry b-1 ends; the
// last must end at esc_bytes), and the escape count against the code-0 entries before any
// escape byte is read. Data tiles do not wait for the header check: they decode from the
// header's claimed layout only when it keeps every read within the bytes received and every
// write within the output capacity (as a valid header's layout does), and the checker's error
// ranks first. Errors are ordered (header, block 0, block 1, ..., final tiling) and the first
// one is reported, so the status equals the CPU's; on an error the output is unspecified.
#include <algorithm>
#include <cstring>

#include "common.cuh"
#include "lanes.h"
#include "trace.cuh"

namespace zipccl::gpu {
namespace detail {
namespace {

struct DecShared {
  uint32_t scan[kWarps][kMaxUnitBlocks / 2];
  int flag;
  int status;
  uint32_t plan;  // bf16 bulk tiles: what warp 0's checks found (decode_unit())
  Layout L;
  Header header;
  // Block entries of the tile, for both tile shapes (bf16/fp16: MU blocks, fp32: MU/2), read
  // before the codec is known: entry[s][m + 1] is block u*M+m's, entry[s][0] the one before.
  BlockEntry entry[2][kMaxUnitBlocks + 1];
  CrcShared crc;
  alignas(16) uint32_t patch[kThreads][4];  // each thread's exponent bytes, for lanes::decode16()
  uint64_t mbar[kMaxUnitBlocks];             // bulk copy groups (decode_unit())
};

// Escape chunks of coded blocks up to this length are staged in shared memory with the
// planes; longer ones (raw blocks' spills, escape-heavy blocks) are read from global memory.
constexpr uint32_t kEscStage = 512;

// Dynamic shared memory of a decode tile: the staged residual and bit-plane bytes of its
// blocks (the largest codec decides: fp32 residuals for MU <= 2, fp16 planes above), then
// kEscStage bytes per block for its escape chunk.
template <int MU>
constexpr uint32_t decode_sections_bytes() {
  constexpr uint32_t f16 = MU * (kBlockElems + 6 * kBlockElems / 8);
  constexpr uint32_t f32 = unit_blocks<Codec::FP32, MU>() * (3 * kBlockElems + 3 * kBlockElems / 8);
  return f16 > f32 ? f16 : f32;
}
template <int MU>
constexpr uint32_t decode_stage_bytes() {
  return decode_sections_bytes<MU>() + MU * kEscStage;
}

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

// Thread 0: stage the planes (bit m of `planes`) and residuals (bit m of `res`) of whole blocks
// m of a tile by the bulk copy engine, into linear slots: copy group 0 (mbar[0]) every block's
// planes and block 0's residuals, group m block m's residuals. planes0 / res0: block 0's first
// plane and residual bytes. (Inlined: as a call, it made decode_unit()'s live values go through
// local memory, 128 bytes of spill stores in the bulk kernel against 36, ptxas -v.)
template <Codec C, int M>
__device__ __forceinline__ void bulk_stage(const uint8_t* planes0, uint64_t bit_stride, const uint8_t* res0,
                                        uint64_t res_stride, uint32_t planes, uint32_t res, uint4* data,
                                        uint64_t* mbar) {
  using G = Geom<C>;
  constexpr uint32_t kResChunks = kBlockElems / 16, kPlaneChunks = kBlockElems / 8 / 16;
  constexpr uint32_t kPlanes0 = G::R * M * kResChunks, kPlaneBytes = kBlockElems / 8;
#pragma unroll
  for (int m = 0; m < M; ++m)
    mbar_expect(&mbar[m], ((res >> m) & 1) * G::R * kBlockElems + (m == 0) * __popc(planes) * G::K * kPlaneBytes);
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
  }
}

// Decode one tile: blocks u*M .. u*M+M-1 of a message whose header claims codec C. Residual
// and bit-plane bytes of all M blocks are staged in shared memory with asynchronous copies (or
// the bulk copy engine, bulk_stage()), all in flight together, from the header's claimed layout
// while the checker tile checks it (nothing is used unless the check passes): the first copy
// group holds every block's planes and block 0's residuals, so that one scan gives the escape
// counts and positions of all blocks; group m > 0 holds block m's residuals. Short escape chunks
// are staged too (bytes within the checked chunk bounds, used only once the block's code-0
// count equals its chunk length).
template <Codec C, int MU>
__device__ __forceinline__ void decode_unit(const Launch& P, int item, const LaunchItem& it, uint32_t u,
                                            DecShared& sh, uint4* data) {
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
  const auto planes_src = [&](int m) { return L.off_bits + (uint64_t(b0) * kBlockElems + m * kBlockElems) / 8; };
  const auto res_src = [&](int m) { return L.off_res + uint64_t(b0) * kBlockElems + m * kBlockElems; };

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
  // shared by both made the small-launch decoder 0.3-0.4 us slower per message, session 14.)
  const auto bulk_copies = [&] {
    uint32_t planes = 0, res = 0;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      planes |= uint32_t(ok[m] && fits(planes_src(m), (G::K - 1) * L.bit_stride + kBlockElems / 8)) << m;
      res |= uint32_t(ok[m] && fits(res_src(m), (G::R - 1) * L.res_stride + kBlockElems)) << m;
    }
    bulk_stage<C, M>(msg + planes_src(0), L.bit_stride, msg + res_src(0), L.res_stride, planes, res, data, sh.mbar);
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
  // this way (64 and 256 MiB) with a fifth fewer instructions, fp32 within 1% (session 15).
  constexpr bool kLead = MU > 1 && has_bulk_copy() && C == Codec::BF16;
  bool staged_by_lead = false;
  if constexpr (kLead) {
    if (threadIdx.x < 32) {
      uint32_t word = plausible();
      if (word) {
        plan();
        if (bulk) {
          word |= 2;
          if (threadIdx.x == 0) bulk_copies();
          // Lane j: 16-byte piece j of the aligned covers. (Issued before the copy engine's
          // instructions, these loads made bf16 256 MiB decode 1% slower.)
          uint4 x[M];
#pragma unroll
          for (int m = 0; m < M; ++m) {
            const BlockEntry& e = ent[m + 1];
            const uint64_t a = esc_off(m) & ~uint64_t(15);
            const uint32_t cover = ((esc_off(m) & 15) + e.esc_count + 15) & ~15u;
            const bool in_slot = ok[m] && e.mode == kBlockCoded && cover <= kEscStage && fits(a, cover);
            word |= uint32_t(in_slot) << (8 + m);
            x[m] = in_slot && 16 * threadIdx.x < cover ? reinterpret_cast<const uint4*>(msg + a)[threadIdx.x]
                                                       : make_uint4(0, 0, 0, 0);
          }
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

  if (bulk) mbar_wait(&sh.mbar[0]);
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
      mbar_wait(&sh.mbar[m]);
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

// Without a reported error the header passed the checker tile's check, so its fields are the
// message's.
__device__ void finalize(const Launch& P, int item, DecShared& sh) {
  const LaunchItem& it = P.items[item];
  const uint32_t err = P.item_err[item];
  __syncthreads();  // every thread has read the error word before thread 0 clears it
  Status s = err ? static_cast<Status>(~err & 15) : Status::kOk;
  const uint64_t orig = sh.header.orig_bytes;
  if (s == Status::kOk && (sh.header.flags & kFlagChecksum) && cta_crc32c(it.out, orig, sh.crc) != sh.header.checksum)
    s = Status::kBadChecksum;
  if (threadIdx.x == 0) {
    P.item_err[item] = 0;
    P.item_done[item] = 0;
    publish_result(P, item, orig, s, err ? Codec::Raw : static_cast<Codec>(sh.header.codec), false);
  }
}

// Bulk launches: 8 CTAs (64 warps) per SM at 32 registers, which hides more of a tile's two
// round trips than 6 at 40 (a few dozen bytes of spills against none; 64 MiB bf16 +5%, 256 MiB
// +6.5%, session 12).
// Small launches have a CTA or two per SM and keep 40 registers.
template <int MU>
__global__ void __launch_bounds__(kThreads, MU > 1 ? 8 : 6) decode_kernel(const __grid_constant__ Launch P) {
  __shared__ DecShared sh;
  extern __shared__ __align__(128) uint4 staged[];  // (see encode.cu's g_staged)
  ZIPCCL_MARK_TIME(12);
  ZIPCCL_MARK(0);
  if (MU > 1) allow_dependents();  // decode_finish_kernel may launch once the last tiles run
  const int item = find_item(P);
  const LaunchItem& it = P.items[item];
  const uint32_t b = blockIdx.x - it.tile0;
  const bool checker = b == it.tiles - 1;  // the item's last tile checks its header
  // The header and the block entries of this tile (and the one before it, for the tiling
  // check) in one round trip: the table of a coded message starts at byte 128 whatever its
  // codec, so the entries of both tile shapes are read before the codec is known (the same
  // blocks when MU = 1). Reads stay within the bytes received; entries past the table are
  // never used.
  if (threadIdx.x < kHeaderBytes) {
    reinterpret_cast<uint8_t*>(&sh.header)[threadIdx.x] = header_byte(it, threadIdx.x);
  } else if (threadIdx.x < kHeaderBytes + 2 * (kMaxUnitBlocks + 1)) {
    const uint32_t j = threadIdx.x - kHeaderBytes, shape = j / (kMaxUnitBlocks + 1), m = j % (kMaxUnitBlocks + 1);
    const uint32_t M = shape == 0 ? MU : unit_blocks<Codec::FP32, MU>();
    const int64_t blk = int64_t(b) * M - 1 + m;
    BlockEntry e{};
    if (m <= M && blk >= 0 && kHeaderBytes + uint64_t(blk + 1) * kBlockEntryBytes <= it.bytes)
      e = load_entry(it.in + kHeaderBytes + uint64_t(blk) * kBlockEntryBytes);
    sh.entry[shape][m] = e;
  }
  __syncthreads();
  ZIPCCL_MARK(1);
  const Codec claimed = static_cast<Codec>(sh.header.codec);
  const uint32_t M = claimed == Codec::FP32 ? unit_blocks<Codec::FP32, MU>() : MU;
  if (checker) {
    if (threadIdx.x == 0) check(P, item, true, sh);
    __syncthreads();
    const Layout& L = sh.L;  // the tail bytes travel in the header
    if (static_cast<Status>(sh.status) == Status::kOk && L.codec != Codec::Raw && threadIdx.x < L.tail_bytes)
      it.out[L.n_elems * L.g.elem_bytes + threadIdx.x] = sh.header.tail[threadIdx.x];
  } else if (claimed != Codec::Raw && static_cast<uint8_t>(claimed) < kNumCodecs &&
             b * uint64_t(M) < sh.header.n_blocks) {
    switch (claimed) {
      case Codec::BF16:
        decode_unit<Codec::BF16, MU>(P, item, it, b, sh, staged);
        break;
      case Codec::FP16:
        decode_unit<Codec::FP16, MU>(P, item, it, b, sh, staged);
        break;
      default:
        decode_unit<Codec::FP32, MU>(P, item, it, b, sh, staged);
        break;
    }
  } else if (claimed == Codec::Raw) {  // a slice of the payload, once the header is checked
    if (threadIdx.x == 0) check(P, item, false, sh);
    __syncthreads();
    const Layout& L = sh.L;
    if (static_cast<Status>(sh.status) == Status::kOk) {
      const uint32_t data_tiles = it.tiles - 1;
      const uint64_t span = ((L.orig_bytes + data_tiles - 1) / data_tiles + 15) & ~uint64_t(15);
      const uint64_t lo = min(uint64_t(b) * span, L.orig_bytes);
      cta_copy(it.out + lo, it.in + kHeaderBytes + lo, min(span, L.orig_bytes - lo));
    }
  }
  ZIPCCL_MARK(6);  // (slot 7 is the encoder's)
  ZIPCCL_MARK(8);
  // Small launches: the item's last tile publishes (bulk ones: decode_finish_kernel); slot 9
  // follows slot 8 at once in bulk ones.
  bool last = false;
  if (MU == 1) last = finish_tile(P, item, &sh.flag);
  ZIPCCL_MARK(9);
  if (last) finalize(P, item, sh);
  ZIPCCL_MARK(10);
  ZIPCCL_MARK_TIME(13);
}

// Bulk launches: one CTA per item publishes its result once the decode kernel has finished.
__global__ void __launch_bounds__(kThreads) decode_finish_kernel(const __grid_constant__ Launch P) {
  __shared__ DecShared sh;
  grid_dependency_wait();
  const int item = blockIdx.x;
  const LaunchItem& it = P.items[item];
  if (threadIdx.x < kHeaderBytes)
    reinterpret_cast<uint8_t*>(&sh.header)[threadIdx.x] = header_byte(it, threadIdx.x);
  __syncthreads();
  finalize(P, item, sh);
}

}  // namespace
}  // namespace detail

#ifdef ZIPCCL_GPU_TRACE
cudaError_t read_decode_trace(unsigned long long (*out)[kTraceSlots]) {
  return cudaMemcpyFromSymbol(out, detail::g_trace, sizeof detail::g_trace);
}
#endif

cudaError_t decode_batch(const DecodeItem* items, int n, void* temp, size_t temp_size, Result* results,
                         cudaStream_t stream) {
  using namespace detail;
  if (n < 0 || (n > 0 && (!items || !temp || !results))) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i)  // all before the first launch (see launch_error())
    if ((items[i].in_bytes && !items[i].in) || (items[i].out_cap && !items[i].out)) return cudaErrorInvalidValue;
  bool queued = false;
  for (int first = 0; first < n; first += kMaxBatch) {
    const int m = std::min(n - first, kMaxBatch);
    Launch P{};
    for (int i = 0; i < m; ++i) {
      const DecodeItem& d = items[first + i];
      LaunchItem& l = P.items[i];
      l.in = static_cast<const uint8_t*>(d.in);
      l.out = static_cast<uint8_t*>(d.out);
      l.bytes = d.in_bytes;
      l.cap = d.out_cap;
    }
    bool bulk;
    const uint32_t tiles =
        finish_launch(P, m, &LaunchItem::cap, kDecodeBulkMU, 1, 0, temp, temp_size, results + first, &bulk);
    if (tiles == 0) return launch_error(cudaErrorInvalidValue, queued, temp, temp_size, stream);
    if (bulk)
      decode_kernel<kDecodeBulkMU><<<tiles, kThreads, decode_stage_bytes<kDecodeBulkMU>(), stream>>>(P);
    else
      decode_kernel<1><<<tiles, kThreads, decode_stage_bytes<1>(), stream>>>(P);
    cudaError_t err = cudaGetLastError();
    queued |= err == cudaSuccess;
    if (bulk && err == cudaSuccess) err = launch_after(decode_finish_kernel, m, kThreads, stream, P);
    if (err != cudaSuccess) return launch_error(err, queued, temp, temp_size, stream);
  }
  return cudaSuccess;
}

}  // namespace zipccl::gpu
