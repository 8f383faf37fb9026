// The encoder's work on one tile: stage its input in shared memory, code its blocks (residual
// bytes, bit-planes, escape masks), get its escape offset by the look-back or defer it to the
// fixup kernel, and write its block entries and escape chunks.
#pragma once

#include <cstdint>
#include <cstring>

#include "async_copy.cuh"
#include "cta.cuh"
#include "encode_frame.cuh"
#include "encode_lookback.cuh"
#include "encode_shared.cuh"
#include "encode_window.cuh"
#include "launch.cuh"
#include "lanes.h"
#include "swizzle.h"
#include "tiling.cuh"
#include "trace.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

// Stage tile u's input (as codec c tiles it) in shared memory, one copy group per 8 KiB: a
// group per bf16/fp16 block, two per fp32 block (waited for together). Bytes past the last
// whole element are staged too and never read as elements. By NT threads, t the caller's index
// among them (a multiple of 32).
template <int MU, int NT>
__device__ __forceinline__ void stage_tile(const LaunchItem& it, Codec c, uint32_t u, uint4* data,
                                           uint32_t t = threadIdx.x) {
  const uint32_t unit = unit_bytes<MU>(c);
  const bool vec = (reinterpret_cast<uintptr_t>(it.in) & 15) == 0;
  if (vec && uint64_t(u + 1) * unit <= it.bytes) {  // a whole tile: no bounds checks
    const uint8_t* src = it.in + uint64_t(u) * unit + 16 * t;
    uint4* dst = data + swz(t);  // swz(32k + c) == 32k + swz(c)
    auto group = [&](uint32_t g) {
#pragma unroll
      for (int i = 0; i < 512 / NT; ++i) cp_async16(dst + g * 512 + i * NT, src + g * 8192 + 16 * i * NT);
      cp_async_commit();
    };
    // Unrolled at the tile size of bf16/fp16 (and of fp32 in bulk tiles): the loop's address
    // arithmetic was 13 instructions per copy.
    if (unit == tile_bytes<MU>()) {
#pragma unroll
      for (uint32_t g = 0; g < tile_bytes<MU>() / 8192; ++g) group(g);
    } else {
#pragma unroll 1
      for (uint32_t g = 0; g < unit / 8192; ++g) group(g);
    }
    return;
  }
  for (uint32_t g = 0; g < unit / 8192; ++g) {
    const uint64_t begin = uint64_t(u) * unit + g * 8192;
    if (begin < it.bytes)
      stage<NT>(data, g * 512, it.in + begin, static_cast<uint32_t>(min(uint64_t(8192), it.bytes - begin)), vec, t);
    cp_async_commit();
  }
}

// A thread's PT elements of block m of the staged tile, as W words (2 bf16/fp16 or 1 fp32 each).
template <Codec C, int W>
__device__ __forceinline__ void read_words(const uint4* data, int m, uint32_t (&w)[W]) {
  constexpr uint32_t kBlockChunks = kBlockElems * Geom<C>::EB / 16;
  static_assert(kBlockChunks % 32 == 0, "swz() of block offsets");
#pragma unroll
  for (int q = 0; q < W / 4; ++q) {
    const uint4 x = data[m * kBlockChunks + swz((W / 4) * threadIdx.x + q)];
    w[4 * q] = x.x;
    w[4 * q + 1] = x.y;
    w[4 * q + 2] = x.z;
    w[4 * q + 3] = x.w;
  }
}

// Words 8h .. 8h+7 of w (16 bf16/fp16 elements), for lanes::stats16() and code16().
template <int W>
__device__ __forceinline__ void words8(const uint32_t (&w)[W], int h, uint32_t (&x)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = w[8 * h + i];
}

template <Codec C, int W>
__device__ __forceinline__ uint32_t elem_at(const uint32_t (&w)[W], int j) {
  if constexpr (C == Codec::FP32)
    return w[j];
  else
    return (w[j / 2] >> (16 * (j & 1))) & 0xFFFF;
}

// A thread's PT bits of plane k (its 8-element groups in bytes 0, 1 (, 2, 3)), at its aligned
// slot `planes` of plane 0.
template <int PT>
__device__ __forceinline__ void put_plane_bits(uint8_t* planes, uint64_t bit_stride, uint32_t k, uint32_t bits) {
  if constexpr (PT == 16)
    reinterpret_cast<uint16_t*>(planes)[k * (bit_stride / 2)] = static_cast<uint16_t>(bits);
  else
    reinterpret_cast<uint32_t*>(planes)[k * (bit_stride / 4)] = bits;
}

// This thread's escape mask of block m in EncShared::escm: 16 bits, or 32 in 128-thread CTAs.
template <int PT>
__device__ __forceinline__ void put_escm(EncShared& sh, int m, uint32_t mask) {
  if constexpr (PT == 16)
    sh.escm[m][threadIdx.x] = static_cast<uint16_t>(mask);
  else
    reinterpret_cast<uint32_t*>(sh.escm[m])[threadIdx.x] = mask;
}
template <int PT>
__device__ __forceinline__ uint32_t escm_of(const EncShared& sh, int m) {
  return PT == 16 ? sh.escm[m][threadIdx.x] : reinterpret_cast<const uint32_t*>(sh.escm[m])[threadIdx.x];
}

// Element i of block m of the staged tile.
template <Codec C>
__device__ __forceinline__ uint32_t staged_elem(const uint4* data, int m, uint32_t i) {
  const uint32_t off = (m * kBlockElems + i) * Geom<C>::EB;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(data + swz(off / 16)) + off % 16;
  return Geom<C>::EB == 4 ? *reinterpret_cast<const uint32_t*>(p) : *reinterpret_cast<const uint16_t*>(p);
}

// This thread's element j (0..15) of block m of the staged tile, at own ^ (j EB) with own =
// own_base(t, EB) (swizzle.h): two instructions per escape instead of staged_elem()'s eight.
template <Codec C>
__device__ __forceinline__ uint32_t own_elem(const uint4* data, int m, uint32_t own, uint32_t j) {
  constexpr uint32_t EB = Geom<C>::EB;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(data + m * (kBlockElems * EB / 16)) + (own ^ (j * EB));
  return EB == 4 ? *reinterpret_cast<const uint32_t*>(p) : *reinterpret_cast<const uint16_t*>(p);
}

// Code one tile: blocks u*M .. u*M+M-1 of the message. The tile's input is staged in shared
// memory with asynchronous copies (by the caller when `staged`, else here), all in flight at
// once, block m's group(s) waited for before block m is coded; every pass reads shared memory.
// Per block only the thread's escape mask outlives the block's iteration, in shared memory (in
// registers, at 40 per thread, ptxas moved it through local memory in every iteration of the
// bf16 kernel's block loop), so registers do not grow with the tile. A thread codes PT (16 or
// 32) consecutive elements of each block: NT = 4096 / PT threads.
template <Codec C, int MU, int PT, typename Next>
__device__ __forceinline__ void encode_unit(const LaunchItem& it, unsigned long long* st, uint8_t* scratch,
                                            uint32_t* group, const Layout& L, uint32_t u, EncShared& sh, uint4* data,
                                            bool staged, bool header, const Next& next) {
  using G = Geom<C>;
  constexpr int M = unit_blocks<C, MU>();
  static_assert(M <= kMaxUnitBlocks, "shared arrays and copy-group waits hold 4 blocks");
  constexpr int NT = kBlockElems / PT, NW = NT / 32;
  static_assert(PT == 16 || PT == 32, "16 or 32 elements per thread");
  constexpr int W = PT * G::EB / 4;  // words per thread and block
  constexpr int kBlockGroups = kBlockElems * G::EB / 8192, kGroups = M * kBlockGroups;  // copy groups
  const uint32_t b0 = u * M;
  const uint32_t e0 = threadIdx.x * PT;
  const bool out_vec = (reinterpret_cast<uintptr_t>(it.out) & 15) == 0;
  uint8_t* out = it.out;
  if (!staged) stage_tile<MU, NT>(it, C, u, data);
  // Elements per block from the tile's count in 32-bit arithmetic (block_elems()'s 64-bit form,
  // evaluated per use, was 9% of the bulk encoder's instructions), the count in shared memory
  // for multi-block tiles (in a register the bf16 bulk kernel spilled); a raw block's chunk
  // from the codec's constant plane count.
  const uint64_t start = uint64_t(b0) * kBlockElems;
  const uint32_t tile_elems = L.n_elems > start ? uint32_t(min(L.n_elems - start, uint64_t(M) * kBlockElems)) : 0;
  if (M > 1 && threadIdx.x == 0) sh.tile_elems = tile_elems;
  auto elems = [&](int m) {
    const uint32_t lo = m * kBlockElems, n = M > 1 ? sh.tile_elems : tile_elems;
    return n > lo ? min(n - lo, kBlockElems) : 0u;
  };

  // Codes, residual bytes and code bit-planes in one pass per block. Planes are written before
  // the block is known to be coded: a block that turns out raw rewrites all its plane bytes
  // after the escape scan (ordered by its barrier). sh.escm[m][t]: thread t's escapes in block
  // m, bit j = element j.
#pragma unroll 1
  for (int m0 = 0; m0 < M; ++m0) {
    // m opaque to the compiler in the four-block bf16/fp16 loops of 256-thread CTAs: otherwise
    // it turns the block's addresses into 64-bit pointers carried across iterations, which at
    // 40 registers go through local memory (bf16 kernel: -10% at 256 MiB). fp32's two-block
    // loop has no such pointers and was 9% slower with it; 128-thread CTAs have 80 registers.
    int m = m0;
    if constexpr (M > 1 && G::EB == 2 && PT == 16) asm volatile("" : "+r"(m));
    cp_async_wait(kGroups - kBlockGroups * (m + 1));
    __syncthreads();  // also orders thread 0's sh.tile_elems before elems()
    const uint32_t nb = elems(m), valid = nb > e0 ? min(nb - e0, uint32_t(PT)) : 0;
    if (m == 0) ZIPCCL_MARK(2);
    uint32_t base;
    {  // the block's window from its mean nonzero exponent
      uint32_t w[W];
      read_words<C>(data, m, w);
      uint32_t s = 0;  // exponent sum + (nonzero exponents << kCountShift)
      bool whole = false;
      if constexpr (C != Codec::FP32) {
        whole = valid == PT;
        if (whole) {
#pragma unroll
          for (int h = 0; h < W / 8; ++h) {
            uint32_t x[8];
            words8(w, h, x);
            s += lanes::stats16<C>(x);
          }
        }
      }
      if (!whole) {
#pragma unroll
        for (int j = 0; j < PT; ++j) {
          const uint32_t e = elem_exponent(C, elem_at<C>(w, j));
          if (uint32_t(j) < valid) s += e + (uint32_t(e != 0) << lanes::kCountShift);
        }
      }
      base = cta_window_base<C, NW>(s, sh, m);
      uint32_t down = PT, up = PT;  // escapes that base - 1 and base + 1 would add, plus PT
      const bool full = valid == PT;
      if (full) {
#pragma unroll
        for (int h = 0; h < PT / 16; ++h) {
          uint32_t d, u;
          if constexpr (C == Codec::FP32) {
            uint32_t x[16];
#pragma unroll
            for (int i = 0; i < 16; ++i) x[i] = w[16 * h + i];
            lanes::shift_escapes16_fp32(x, base, &d, &u);
          } else {
            uint32_t x[8];
            words8(w, h, x);
            lanes::shift_escapes16<C>(x, base, &d, &u);
          }
          down += d - 16;
          up += u - 16;
        }
      } else {
#pragma unroll
        for (int j = 0; j < PT; ++j) {
          const uint32_t d = (elem_exponent(C, elem_at<C>(w, j)) - base) & 0xFF;  // 0..6 inside the window
          if (uint32_t(j) < valid) {
            down += uint32_t(d == kWindow - 1) - uint32_t(d == 0xFF);
            up += uint32_t(d == 0) - uint32_t(d == kWindow);
          }
        }
      }
      base = cta_refine_base<C, NW>(down, up, base, sh, m);
    }
    if (m == 0) ZIPCCL_MARK(3);
    const uint64_t first = (uint64_t(b0) + m) * kBlockElems;
    uint8_t* planes = out + L.off_bits + first / 8 + (PT / 8) * threadIdx.x;
    uint32_t w[W];
    read_words<C>(data, m, w);
    uint32_t escmask = 0;
    bool done = false;
    if constexpr (C != Codec::FP32) {
      if (out_vec && valid == PT) {
        uint32_t pl[Geom<C>::K] = {};
#pragma unroll
        for (int h = 0; h < PT / 16; ++h) {
          uint32_t res[4], ph[Geom<C>::K];
          uint32_t x[8];
          words8(w, h, x);
          escmask |= lanes::code16<C>(x, base, res, ph) << (16 * h);
          *reinterpret_cast<uint4*>(out + L.off_res + first + e0 + 16 * h) = make_uint4(res[0], res[1], res[2], res[3]);
#pragma unroll
          for (uint32_t k = 0; k < Geom<C>::K; ++k) pl[k] |= (ph[k] & 0xFFFF) << (16 * h);
        }
#pragma unroll
        for (uint32_t k = 0; k < Geom<C>::K; ++k) put_plane_bits<PT>(planes, L.bit_stride, k, pl[k]);
        done = true;
      }
    }
    if (!done) {
#pragma unroll
      for (uint32_t r = 0; r < G::R; ++r) {
        uint8_t* dst = out + L.off_res + r * L.res_stride + first + e0;
        if (out_vec && valid == PT) {
#pragma unroll
          for (int h = 0; h < PT / 16; ++h) {
            uint32_t x[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              x[i] = 0;
#pragma unroll
              for (int k = 0; k < 4; ++k)
                x[i] |= uint32_t(elem_residual(C, elem_at<C>(w, 16 * h + 4 * i + k), r)) << (8 * k);
            }
            reinterpret_cast<uint4*>(dst)[h] = make_uint4(x[0], x[1], x[2], x[3]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < PT; ++j)
            if (uint32_t(j) < valid) dst[j] = elem_residual(C, elem_at<C>(w, j), r);
        }
      }
      uint32_t sym[PT];
#pragma unroll
      for (int j = 0; j < PT; ++j) {
        const uint32_t v = elem_at<C>(w, j);
        // Elements past the block's end have no code (zero bits), as in the CPU encoder.
        sym[j] = uint32_t(j) < valid ? exp_code(elem_exponent(C, v), base) : 1;
        escmask |= uint32_t(sym[j] == 0) << j;
        if (uint32_t(j) >= valid) sym[j] = 0;
        if (C == Codec::FP16) sym[j] |= fp16_extra(v) << 3;
      }
#pragma unroll
      for (uint32_t k = 0; k < G::K; ++k) {
        uint32_t bits = 0;  // the thread's 8-element groups in bytes 0, 1 (, 2, 3)
#pragma unroll
        for (int j = 0; j < PT; ++j) bits |= ((sym[j] >> k) & 1) << j;
        uint8_t* dst = planes + k * L.bit_stride;
        if (out_vec && valid == PT) {
          put_plane_bits<PT>(planes, L.bit_stride, k, bits);
        } else {
#pragma unroll
          for (int i = 0; i < PT / 8; ++i)
            if (valid > 8u * i) dst[i] = static_cast<uint8_t>(bits >> (8 * i));
        }
      }
    }
    put_escm<PT>(sh, m, escmask);
  }
  ZIPCCL_MARK(4);
  uint32_t esc[M], escapes[M];
#pragma unroll
  for (int m = 0; m < M; ++m) esc[m] = __popc(escm_of<PT>(sh, m));
  cta_scans<M, NW>(esc, escapes, sh.scan);  // esc[m] becomes this thread's first escape slot
  uint32_t unit_chunk = 0;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const uint32_t raw_chunk = raw_chunk_bytes(G::K, elems(m));
    unit_chunk += escapes[m] > raw_chunk ? raw_chunk : escapes[m];
  }
  ZIPCCL_MARK(5);
  // Bulk launches: a tile (other than the first, whose offset is 0) whose escape chunks fit its
  // kEscScratch bytes of temp writes them there, with its block entries' offsets relative to
  // the tile, and leaves without looking back: the look-back waited on predecessors of the same
  // wave that had not counted yet. encode_fixup_kernel places them once every tile has counted.
  const bool deferred = MU > 1 && scratch && u != 0 && unit_chunk <= kEscScratch;
  const unsigned long long own = MU > 1 ? uint64_t(unit_chunk) << 32 : 0;
  if (threadIdx.x == 0) {
    *reinterpret_cast<volatile unsigned long long*>(st + u) =
        (u == 0 ? kInclusive : kAggregate) | (deferred ? kDeferred : 0) | own | unit_chunk;
    if (MU > 1 && group && unit_chunk) atomicAdd(group, unit_chunk);  // for encode_fixup_kernel
  }

  // Small launches: the tile with the last block zeroes the sections' padding while warp 0 looks
  // back and, with `header`, writes the header once it knows the escape section's length, so
  // that the item's last CTA has only the result to publish (-1 us for 512 KiB). Warp 1 stages
  // the next tile meanwhile, if any (the look-back mostly waits).
  const bool last_tile = MU == 1 && b0 + M >= L.n_blocks;
  constexpr uint32_t kFree = Next::kStages ? 64 : 32;  // threads before the free ones
  if (!deferred) {
    if (threadIdx.x < 32) {
      const uint64_t excl = u == 0 ? 0 : look_back(st, u);
      if (threadIdx.x == 0) {
        if (u != 0) *reinterpret_cast<volatile unsigned long long*>(st + u) = kInclusive | own | (excl + unit_chunk);
        sh.bcast = excl;
      }
    } else if (Next::kStages && threadIdx.x < 64) {
      next.stage();
    } else if (last_tile) {
      zero_padding(L, out, threadIdx.x - kFree, NT - kFree);
    }
    __syncthreads();
  }
  ZIPCCL_MARK(6);
  uint64_t esc_off = deferred ? 0 : sh.bcast;
  // A message that overflows its limit becomes Raw at the end: skip what would be discarded,
  // and never write past the capacity.
  if (!deferred && L.off_esc + esc_off + unit_chunk > min(it.limit, it.cap)) return;
  if (last_tile && header && threadIdx.x >= kFree && threadIdx.x < kFree + 32)
    warp_put_header(out, sh, L, esc_off + unit_chunk, it.in + L.n_elems * L.g.elem_bytes, false, 0);
  // The blocks' escape chunks follow each other from the tile's first (in temp when deferred).
  uint8_t* dst = deferred ? scratch + uint64_t(it.tile0 + u) * kEscScratch : out + L.off_esc + esc_off;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const uint32_t b = b0 + m, nb = elems(m);
    const uint32_t raw_chunk = raw_chunk_bytes(G::K, nb);
    const bool raw = escapes[m] > raw_chunk;
    const uint32_t chunk = raw ? raw_chunk : escapes[m];
    if (threadIdx.x == 0 && nb) {
      const BlockEntry e{static_cast<uint32_t>(esc_off), static_cast<uint16_t>(chunk),
                         static_cast<uint8_t>(raw ? 0 : sh.base[m]), raw ? kBlockRaw : kBlockCoded};
      uint8_t* entry = out + L.off_table + uint64_t(b) * kBlockEntryBytes;
      if (out_vec) {
        uint2 x;
        memcpy(&x, &e, sizeof e);
        *reinterpret_cast<uint2*>(entry) = x;
      } else {
        memcpy(entry, &e, sizeof e);
      }
    }
    if (!raw) {
      const uint32_t own = own_base(threadIdx.x, G::EB * PT / 16);
      uint32_t k = esc[m];
      for (uint32_t mk = escm_of<PT>(sh, m); mk; mk &= mk - 1)
        dst[k++] = static_cast<uint8_t>(elem_exponent(C, own_elem<C>(data, m, own, __ffs(mk) - 1)));
    } else {
      // Top bytes: the first K*groups fill the block's plane slots, plane after plane (zero
      // past nb), the rest form the chunk.
      const uint32_t groups = (nb + 7) / 8, in_planes = raw_plane_bytes(G::K, nb);
      uint8_t* planes = out + L.off_bits + uint64_t(b) * kBlockElems / 8;
      for (uint32_t i = threadIdx.x; i < G::K * groups; i += NT)
        planes[(i / groups) * L.bit_stride + i % groups] = i < nb ? elem_top(C, staged_elem<C>(data, m, i)) : 0;
      for (uint32_t i = in_planes + threadIdx.x; i < nb; i += NT)
        dst[i - in_planes] = elem_top(C, staged_elem<C>(data, m, i));
    }
    esc_off += chunk;
    dst += chunk;
  }
  ZIPCCL_MARK(7);
}

}  // namespace
}  // namespace zipccl::gpu::detail
