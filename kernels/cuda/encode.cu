// GPU encoder: one CTA per tile of 1 to 4 blocks (common.cuh), one pass over the input. The
// only serial dependency of the format, each block's offset in the escape section, comes from
// a single-pass decoupled look-back scan (Merrill & Garland) over per-tile escape bytes: a tile
// publishes its escape bytes as soon as it has counted them, with its residual and bit-plane
// bytes already written, then resolves its offset and writes its block entries and escape
// chunks. In small launches the CTA that completes an item last publishes the size (after
// falling back to a Raw message where the CPU does) and the header comes from the tile with the
// last block; bulk launches leave the header, padding, fallback and result to a second kernel.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common.cuh"
#include "lanes.h"
#include "pick.h"
#include "trace.cuh"

namespace zipccl::gpu {
namespace detail {
namespace {

// A tile's state word: flag (bits 62-63) and escape bytes (bits 0-31) for the look-back; in
// bulk launches also the tile's own escape bytes (bits 32-47, at most 4 x 2560) and whether its
// chunks wait in temp (kDeferred), for encode_fixup_kernel.
__device__ constexpr unsigned long long kAggregate = 1ull << 62;  // escape bytes of this tile only
__device__ constexpr unsigned long long kInclusive = 2ull << 62;  // escape bytes up to and with it
__device__ constexpr unsigned long long kDeferred = 1ull << 61;
__device__ __forceinline__ uint32_t own_escapes(unsigned long long s) {
  return static_cast<uint32_t>(s >> 32) & 0xFFFF;
}

// Per-item decision shared by every tile and the finalizer.
struct Plan {
  Codec c;
  bool too_large;
  bool raw;  // Raw message decided before coding (codec, size or layout alone)
  Layout L;
};

struct EncShared {
  Plan plan;  // in shared memory: the layout is too large to keep in registers
  uint32_t red[kWarps];
  uint32_t base[kMaxUnitBlocks];  // window base of each block of the tile
  uint32_t scan[kWarps][kMaxUnitBlocks / 2];
  // Each thread's escape mask per block (encode_unit): 16 bits, or 32 in 128-thread CTAs.
  uint16_t escm[kMaxUnitBlocks][kThreads];
  uint64_t bcast;
  uint32_t tile_elems;
  int flag;
  int codec;
  union {
    Header header;
    CrcShared crc;
    struct {
      uint32_t sum[kWarps][3];  // exponent sum | nonzero count << lanes::kCountShift
      uint32_t esc[kWarps][3];
    } cls;
  };
};

// window_base() of format.h for one block (exp_sum < 2^21, exp_count <= 4096): the same
// result with 32-bit arithmetic, as 64-bit division costs ~100 instructions on the GPU, and
// without branches, so that the classifier's three interleave (a zero count has a zero sum, so
// num <= 0 gives 0 as window_base()'s early returns do; floor(num / (1024 c)) is
// floor(floor(num / 1024) / c)).
template <Codec C>
__device__ __forceinline__ uint32_t block_window_base(uint32_t exp_sum, uint32_t exp_count) {
  constexpr uint32_t kMaxBase = Geom<C>::kExpMax - (kWindow - 1);
  const int32_t num = int32_t(exp_sum * 1024) - int32_t(kWindowOffsetQ10) * int32_t(exp_count);
  return min((uint32_t(max(num, 0)) >> 10) / max(exp_count, 1u), kMaxBase);
}

// ---- Codec choice, bit-exact with zipccl::classify(): the same sampled windows, the same
// block plan per window, its arithmetic in integers (equivalent: pick.h).
__device__ Codec cta_classify(const uint8_t* in, uint64_t n, EncShared& sh) {
  if (n < 64) return Codec::Raw;
  // classify.cc's window, count and stride without 64-bit division by a variable (n / win is 1
  // below 2048 bytes, where win is n rounded down to 4; the stride's divisor is 1, 2 or 3).
  const uint64_t win = n < 2048 ? n & ~uint64_t(3) : 2048;
  const uint64_t windows = n < 2048 ? 1 : (n >> 11) < 4 ? n >> 11 : 4;
  const uint64_t gap = n - win;
  const uint64_t stride = (windows == 4 ? gap / 3 : windows == 3 ? gap / 2 : gap) & ~uint64_t(3);
  // 64 threads (two warps) per window, 32 bytes each: whole 32-byte runs by unconditional loads
  // (16 bytes at a time where aligned), so that all are in flight at once.
  const uint32_t w = threadIdx.x / 64, off = (threadIdx.x % 64) * 32;
  const uint8_t* src = in + w * stride + off;
  const bool whole = w < windows && off + 32 <= win;
  uint32_t word[8];
  if (whole && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    const uint4 a = reinterpret_cast<const uint4*>(src)[0], b = reinterpret_cast<const uint4*>(src)[1];
    const uint32_t x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) word[i] = x[i];
  } else {
    uint8_t x[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) x[j] = whole || (w < windows && off + j < win) ? src[j] : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      word[i] = x[4 * i] | uint32_t(x[4 * i + 1]) << 8 | uint32_t(x[4 * i + 2]) << 16 | uint32_t(x[4 * i + 3]) << 24;
  }
  // Per codec, this thread's exponent sum (bits 0-19) and nonzero count (from bit 20), packed
  // as lanes::stats16() packs them; a 2 KiB window's fit the same word (at most 261,120 and
  // 1024), so warp sums are single REDUX instructions. Bytes past the window are zero, which
  // adds nothing.
  uint32_t st[3] = {lanes::stats16<Codec::BF16>(word), lanes::stats16<Codec::FP16>(word), 0};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t e = elem_exponent(Codec::FP32, word[j]);
    st[2] += e + (uint32_t(e != 0) << lanes::kCountShift);
  }
#pragma unroll
  for (int ci = 0; ci < 3; ++ci) st[ci] = warp_sum(st[ci]);
  if ((threadIdx.x & 31) == 0)
    for (int ci = 0; ci < 3; ++ci) sh.cls.sum[threadIdx.x >> 5][ci] = st[ci];
  __syncthreads();
  // Escapes under each codec's window base for this window (two warps' sums). The zero bytes
  // past the window are exponent-0 elements, escapes under any base but 0: taken off again.
  uint32_t base[3];
#pragma unroll
  for (int ci = 0; ci < 3; ++ci) {
    const uint32_t t = sh.cls.sum[2 * w][ci] + sh.cls.sum[2 * w + 1][ci];
    const uint32_t sum = t & ((1u << lanes::kCountShift) - 1), count = t >> lanes::kCountShift;
    base[ci] = ci == 0   ? block_window_base<Codec::BF16>(sum, count)
               : ci == 1 ? block_window_base<Codec::FP16>(sum, count)
                         : block_window_base<Codec::FP32>(sum, count);
  }
  // This thread's bytes within its window (threads of unused windows: counts not read).
  const uint32_t valid = w >= windows ? 32u : off < win ? min(uint32_t(win) - off, 32u) : 0u;
  uint32_t esc[3] = {lanes::escapes16<Codec::BF16>(word, base[0]), lanes::escapes16<Codec::FP16>(word, base[1]), 0};
#pragma unroll
  for (int j = 0; j < 8; ++j) esc[2] += exp_code(elem_exponent(Codec::FP32, word[j]), base[2]) == 0;
#pragma unroll
  for (int ci = 0; ci < 3; ++ci) {
    const uint32_t eb = ci == 2 ? 4 : 2;
    esc[ci] = warp_sum(esc[ci] - (base[ci] ? (32 - valid) / eb : 0));
  }
  if ((threadIdx.x & 31) == 0)
    for (int ci = 0; ci < 3; ++ci) sh.cls.esc[threadIdx.x >> 5][ci] = esc[ci];
  __syncthreads();
  // Every warp decides alike (no barrier after): lane ci sums codec ci's bits over the windows
  // as classify.cc does (in integers: exact sums either way), then pick::best_codec().
  const uint32_t lane = threadIdx.x & 31, ci = lane < 3 ? lane : 0;
  const CodecGeometry g = geometry(ci == 0 ? Codec::BF16 : ci == 1 ? Codec::FP16 : Codec::FP32);
  const uint32_t nb = static_cast<uint32_t>(win) / g.elem_bytes, raw_chunk = raw_chunk_bytes(g.bit_planes, nb);
  uint32_t bits = 0;  // < 2^17
#pragma unroll
  for (uint32_t wi = 0; wi < 4; ++wi) {  // unrolled, so that the counts are loaded at once
    const uint32_t e = sh.cls.esc[2 * wi][ci] + sh.cls.esc[2 * wi + 1][ci];
    if (wi < windows) bits += nb * (8 * g.res_planes + g.bit_planes) + 8 * min(e, raw_chunk);
  }
  const uint32_t all[3] = {__shfl_sync(~0u, bits, 0), __shfl_sync(~0u, bits, 1), __shfl_sync(~0u, bits, 2)};
  return pick::best_codec(all, 8 * static_cast<uint32_t>(win * windows));
}

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

// Exclusive prefix of escape bytes before tile b, by warp 0 (decoupled look-back).
__device__ uint64_t look_back(unsigned long long* st, uint32_t b) {
  const int lane = threadIdx.x & 31;
  uint64_t excl = 0;
  int64_t pred = int64_t(b) - 1;
  for (;;) {
    const int64_t idx = pred - lane;
    const unsigned long long s =
        idx >= 0 ? *reinterpret_cast<volatile unsigned long long*>(st + idx) : kInclusive;
    const uint32_t flag = uint32_t(s >> 62);
    const unsigned invalid = __ballot_sync(~0u, flag == 0);
    const unsigned incl = __ballot_sync(~0u, flag == 2);
    const unsigned need = incl ? ((incl & (0u - incl)) - 1) | (incl & (0u - incl)) : ~0u;
    if (invalid & need) {
      __nanosleep(20);
      continue;
    }
    excl += warp_sum64((need >> lane) & 1 ? (s & 0xFFFFFFFFull) : 0);
    if (incl) return excl;
    pred -= 32;
  }
}

// Blocks per tile of codec c (unit_blocks()), and the tile's bytes of input.
template <int MU>
__device__ __forceinline__ uint32_t tile_blocks(Codec c) {
  return c == Codec::FP32 ? unit_blocks<Codec::FP32, MU>() : MU;
}
template <int MU>
__device__ __forceinline__ uint32_t unit_bytes(Codec c) {
  return c == Codec::FP32 ? tile_blocks<MU>(c) * kBlockElems * 4 : tile_bytes<MU>();
}

// Stage tile u's input (as codec c tiles it) in shared memory, one copy group per 8 KiB: a
// group per bf16/fp16 block, two per fp32 block (waited for together). Bytes past the last
// whole element are staged too and never read as elements.
template <int MU, int NT>
__device__ __forceinline__ void stage_tile(const LaunchItem& it, Codec c, uint32_t u, uint4* data) {
  const uint32_t unit = unit_bytes<MU>(c);
  const bool vec = (reinterpret_cast<uintptr_t>(it.in) & 15) == 0;
  if (vec && uint64_t(u + 1) * unit <= it.bytes) {  // a whole tile: no bounds checks
    const uint8_t* src = it.in + uint64_t(u) * unit + 16 * threadIdx.x;
    uint4* dst = data + swz(threadIdx.x);  // swz(32k + c) == 32k + swz(c)
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
      stage<NT>(data, g * 512, it.in + begin, static_cast<uint32_t>(min(uint64_t(8192), it.bytes - begin)), vec);
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

// The block's window base from each thread's exponent sum and nonzero count, packed in one word
// (a warp's sum < 32 * 32 * 255 < 2^kCountShift, its count <= 1024): warp sums, then thread 0
// adds the NW warps' and computes the base once for the CTA.
using lanes::kCountShift;
template <Codec C, int NW>
__device__ __forceinline__ uint32_t cta_window_base(uint32_t s, EncShared& sh, int m) {
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t sum = 0, count = 0;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      sum += sh.red[w] & ((1u << kCountShift) - 1);
      count += sh.red[w] >> kCountShift;
    }
    sh.base[m] = block_window_base<C>(sum, count);
  }
  __syncthreads();
  return sh.base[m];
}

// Zero the padding of the fixed sections (after the block table, after each residual plane's
// n_elems bytes, after each bit-plane's used bytes), as the CPU encoder does: thread t of
// `stride` threads. This and warp_put_header() are not inlined: inlined, they raise the
// small-launch kernel's spill stores from 180 to 374 bytes (ptxas -v, sm_90).
__device__ __noinline__ void zero_padding(const Layout& L, uint8_t* out, uint32_t t, uint32_t stride) {
  const uint64_t table_end = L.off_table + uint64_t(L.n_blocks) * kBlockEntryBytes;
  for (uint64_t i = table_end + t; i < L.off_res; i += stride) out[i] = 0;
  for (uint32_t r = 0; r < L.g.res_planes; ++r)
    for (uint64_t i = L.n_elems + t; i < L.res_stride; i += stride) out[L.off_res + r * L.res_stride + i] = 0;
  const uint64_t used = (L.n_elems + 7) / 8;
  for (uint32_t k = 0; k < L.g.bit_planes; ++k)
    for (uint64_t i = used + t; i < L.bit_stride; i += stride) out[L.off_bits + k * L.bit_stride + i] = 0;
}

// Write a message header with one warp: lane 0 builds it in shared memory, each lane stores
// four of its bytes.
__device__ __noinline__ void warp_put_header(uint8_t* out, EncShared& sh, const Layout& L, uint64_t esc_bytes,
                                const uint8_t* tail, bool checksum, uint32_t crc) {
  const uint32_t lane = threadIdx.x & 31;
  if (lane == 0) sh.header = make_header(L, esc_bytes, tail, checksum, crc);
  __syncwarp();
  const uint32_t w = reinterpret_cast<const uint32_t*>(&sh.header)[lane];
  if ((reinterpret_cast<uintptr_t>(out) & 3) == 0) {
    reinterpret_cast<uint32_t*>(out)[lane] = w;
  } else {
    for (int i = 0; i < 4; ++i) out[4 * lane + i] = static_cast<uint8_t>(w >> (8 * i));
  }
}

// Code one tile: blocks u*M .. u*M+M-1 of the message. The tile's input is staged in shared
// memory with asynchronous copies (by the caller when `staged`, else here), all in flight at
// once, block m's group(s) waited for before block m is coded; every pass reads shared memory.
// Per block only the thread's escape mask outlives the block's iteration, in shared memory (in
// registers, at 40 per thread, ptxas moved it through local memory in every iteration of the
// bf16 kernel's block loop), so registers do not grow with the tile. A thread codes PT (16 or
// 32) consecutive elements of each block: NT = 4096 / PT threads.
template <Codec C, int MU, int PT>
__device__ __forceinline__ void encode_unit(const LaunchItem& it, unsigned long long* st, uint8_t* scratch,
                                            uint32_t* group, const Layout& L, uint32_t u, EncShared& sh, uint4* data,
                                            bool staged, bool header) {
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
          if (uint32_t(j) < valid) s += e + (uint32_t(e != 0) << kCountShift);
        }
      }
      base = cta_window_base<C, NW>(s, sh, m);
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
  // that the item's last CTA has only the result to publish (-1 us for 512 KiB).
  const bool last_tile = MU == 1 && b0 + M >= L.n_blocks;
  if (!deferred) {
    if (threadIdx.x < 32) {
      const uint64_t excl = u == 0 ? 0 : look_back(st, u);
      if (threadIdx.x == 0) {
        if (u != 0) *reinterpret_cast<volatile unsigned long long*>(st + u) = kInclusive | own | (excl + unit_chunk);
        sh.bcast = excl;
      }
    } else if (last_tile) {
      zero_padding(L, out, threadIdx.x - 32, NT - 32);
    }
    __syncthreads();
  }
  ZIPCCL_MARK(6);
  uint64_t esc_off = deferred ? 0 : sh.bcast;
  // A message that overflows its limit becomes Raw at the end: skip what would be discarded,
  // and never write past the capacity.
  if (!deferred && L.off_esc + esc_off + unit_chunk > min(it.limit, it.cap)) return;
  if (last_tile && header && threadIdx.x >= 32 && threadIdx.x < 64)
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

// The slice of a Raw message's payload that tile b copies.
__device__ __forceinline__ void raw_slice(const LaunchItem& it, uint32_t b, uint64_t* lo, uint64_t* len) {
  const uint64_t span = ((it.bytes + it.tiles - 1) / it.tiles + 15) & ~uint64_t(15);
  *lo = min(uint64_t(b) * span, it.bytes);
  *len = min(span, it.bytes - *lo);
}

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

// The codec of an auto item: tile 0 classifies the input and publishes its choice in temp;
// the other tiles wait for it (tile 0 runs first or alongside, as for the look-back), so the
// sample is classified once per item, not once per tile.
__device__ Codec item_codec(const Launch& P, int item, uint32_t b, EncShared& sh) {
  const LaunchItem& it = P.items[item];
  if (b == 0) {
    const Codec c = cta_classify(it.in, it.bytes, sh);
    if (threadIdx.x == 0) *reinterpret_cast<volatile uint32_t*>(&P.item_codec[item]) = kCodecChosen | uint32_t(c);
    return c;
  }
  if (threadIdx.x == 0) {
    uint32_t w;
    while (!((w = *reinterpret_cast<volatile uint32_t*>(&P.item_codec[item])) & kCodecChosen)) __nanosleep(64);
    sh.codec = static_cast<int>(w & 0xFF);
  }
  __syncthreads();
  return static_cast<Codec>(sh.codec);
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
template <Codec C, int MU>
__device__ __noinline__ void encode_unit_apart(const LaunchItem& it, unsigned long long* st, uint8_t* scratch,
                                               uint32_t* group, uint32_t u, bool staged, bool header) {
  encode_unit<C, MU, 16>(it, st, scratch, group, g_sh.plan.L, u, g_sh, g_staged, staged, header);
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

template <int MU, int FIXED>
__global__ void __launch_bounds__(encode_threads(MU, FIXED), 6) encode_kernel(const __grid_constant__ Launch P) {
  constexpr int PT = encode_pt(MU, FIXED), NT = kBlockElems / PT;
  static_assert(FIXED != kAnyCodec || NT == kThreads, "the classifier and encode_unit_apart() use 256 threads");
  EncShared& sh = g_sh;
  uint4* const staged = g_staged;
  ZIPCCL_MARK_TIME(12);
  ZIPCCL_MARK(0);
  if (MU > 1) allow_dependents();  // the follow-up kernels may launch once the last tiles run
  const int item = find_item(P);
  const LaunchItem& it = P.items[item];
  const uint32_t b = blockIdx.x - it.tile0;
  unsigned long long* st = P.state + it.tile0;
  // The tile's input is requested first, so that the codec choice and the plan overlap with
  // the loads. An auto item is staged as bf16/fp16 tiles it, which is how fp32 tiles it too
  // except in 8 KiB tiles (MU = 1), where an fp32 tile restages.
  // Neither the guess nor the codec is kept in a register across the barrier (at 40 registers
  // ptxas spilled the codec, and its reload from local memory stalled every warp after it).
  constexpr bool fixed = FIXED != kAnyCodec;
  {
    const Codec guess = fixed ? static_cast<Codec>(FIXED) : it.auto_codec ? Codec::BF16 : static_cast<Codec>(it.codec);
    if (guess != Codec::Raw) stage_tile<MU, NT>(it, guess, b, staged);
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
        encode_unit<C, MU, PT>(it, st, P.scratch, group, p.L, b, sh, staged, as_staged, !P.checksum);
      else
        encode_unit_apart<C, MU>(it, st, P.scratch, group, b, as_staged, !P.checksum);
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
  cp_async_wait(0);  // no copy may land in shared memory after the CTA has left
  ZIPCCL_MARK(8);
  // Small launches: the item's last tile finalizes (bulk ones: encode_finish_kernel); slot 9
  // follows slot 8 at once in bulk ones.
  bool last = false;
  if (MU == 1) last = finish_tile(P, item, &sh.flag);
  ZIPCCL_MARK(9);
  if (last) finalize<MU>(P, item, p, st, sh);
  ZIPCCL_MARK(10);
  ZIPCCL_MARK_TIME(13);
}

// The encode kernel for a launch whose items all use codec `fixed` (kAnyCodec: mixed or auto).
template <int MU>
void (*encode_kernel_for(int fixed))(Launch) {
  switch (fixed) {
    case static_cast<int>(Codec::BF16):
      return encode_kernel<MU, static_cast<int>(Codec::BF16)>;
    case static_cast<int>(Codec::FP16):
      return encode_kernel<MU, static_cast<int>(Codec::FP16)>;
    case static_cast<int>(Codec::FP32):
      return encode_kernel<MU, static_cast<int>(Codec::FP32)>;
    default:
      return encode_kernel<MU, kAnyCodec>;
  }
}

// An item's plan once encode_kernel has finished (an auto item's codec is in temp by then).
__device__ __forceinline__ Plan finished_plan(const Launch& P, int item) {
  const LaunchItem& it = P.items[item];
  const volatile uint32_t& chosen = P.item_codec[item];
  return make_plan(it, it.auto_codec ? static_cast<Codec>(chosen & 0xFF) : static_cast<Codec>(it.codec));
}

// Bulk launches, after encode_kernel: a warp per tile, kFixupWarps tiles per CTA. A deferred
// tile gets its offset from the escape bytes of the tiles before it in its group and the sums
// of the groups before, in one round of loads that every lane issues at once (every tile has
// counted, so nothing waits; a look-back here walked through the aggregates of deferred tiles,
// ~32 round trips for the last of 2048), moves its escape chunks from temp into the message and
// adds the offset to its block entries (a reduction, not a read). Its state word stays as the
// encode kernel left it: the later tiles of the group read its own count, and the finisher takes
// the item's total from the group sums. 256 MiB: 8.3 us; a CTA per tile storing 8 bytes per
// thread bytewise 13 us (docs/gpu-codec.md).
constexpr int kFixupWarps = 8;
static_assert(kEscScratch % 128 == 0 && kGroupTiles % 32 == 0,
              "a slot's words and a group's state words spread evenly over the lanes");
template <int MU>
__global__ void __launch_bounds__(32 * kFixupWarps) encode_fixup_kernel(const __grid_constant__ Launch P) {
  grid_dependency_wait();
  allow_dependents();  // after the wait: encode_finish_kernel starts once the encode kernel has finished
  if (!P.scratch) return;  // no tile deferred
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

// Bulk launches: one CTA per item finalizes it. It starts once the encode kernel has finished
// (encode_fixup_kernel lets it launch only then) and overlaps the fixup kernel (finalize()).
template <int MU>
__global__ void __launch_bounds__(kThreads) encode_finish_kernel(const __grid_constant__ Launch P) {
  __shared__ EncShared sh;
  const int item = blockIdx.x;
  const LaunchItem& it = P.items[item];
  if (threadIdx.x == 0)
    sh.plan = finished_plan(P, item);
  __syncthreads();
  finalize<MU>(P, item, sh.plan, P.state + it.tile0, sh);
}

}  // namespace
}  // namespace detail

#ifdef ZIPCCL_GPU_TRACE
cudaError_t read_encode_trace(unsigned long long (*out)[kTraceSlots]) {
  return cudaMemcpyFromSymbol(out, detail::g_trace, sizeof detail::g_trace);
}
#endif

cudaError_t encode_batch(const EncodeItem* items, int n, void* temp, size_t temp_size, Result* results,
                         cudaStream_t stream, const EncodeOptions& opt) {
  using namespace detail;
  if (n < 0 || (n > 0 && (!items || !temp || !results))) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i)  // all before the first launch (see launch_error())
    if ((items[i].bytes && !items[i].in) || !items[i].out || static_cast<uint8_t>(items[i].codec) >= kNumCodecs)
      return cudaErrorInvalidValue;
  bool queued = false;
  for (int first = 0; first < n; first += kMaxBatch) {
    const int m = std::min(n - first, kMaxBatch);
    Launch P{};
    P.checksum = opt.checksum;
    P.raw_header_only = opt.raw_header_only;
    for (int i = 0; i < m; ++i) {
      const EncodeItem& e = items[first + i];
      LaunchItem& l = P.items[i];
      l.in = static_cast<const uint8_t*>(e.in);
      l.out = static_cast<uint8_t*>(e.out);
      l.bytes = e.bytes;
      l.cap = e.out_cap;
      l.limit = coded_limit(e.bytes, opt.max_ratio);  // the CPU encoder's limit
      l.codec = static_cast<uint8_t>(e.codec);
      l.auto_codec = e.auto_codec;
    }
    int fixed = m > 0 && !P.items[0].auto_codec && P.items[0].codec != static_cast<uint8_t>(Codec::Raw)
                    ? P.items[0].codec
                    : kAnyCodec;
    for (int i = 1; i < m; ++i)
      if (P.items[i].auto_codec || P.items[i].codec != P.items[0].codec) fixed = kAnyCodec;
    bool bulk;
    const uint32_t tiles =
        finish_launch(P, m, &LaunchItem::bytes, kEncodeBulkMU, 0, kEscScratch, temp, temp_size, results + first, &bulk);
    if (tiles == 0) return launch_error(cudaErrorInvalidValue, queued, temp, temp_size, stream);
    // Dynamic shared memory: one staged unit (MU bf16/fp16 blocks or MU/2, at least one, fp32
    // blocks).
    if (bulk)
      encode_kernel_for<kEncodeBulkMU>(fixed)<<<tiles, encode_threads(kEncodeBulkMU, fixed), tile_bytes<kEncodeBulkMU>(),
                                               stream>>>(P);
    else
      encode_kernel_for<1>(fixed)<<<tiles, kThreads, 4 * kBlockElems, stream>>>(P);
    cudaError_t err = cudaGetLastError();
    queued |= err == cudaSuccess;
    if (bulk && err == cudaSuccess)
      err = launch_after(encode_fixup_kernel<kEncodeBulkMU>, (tiles + kFixupWarps - 1) / kFixupWarps, 32 * kFixupWarps,
                         stream, P);
    if (bulk && err == cudaSuccess) err = launch_after(encode_finish_kernel<kEncodeBulkMU>, m, kThreads, stream, P);
    if (err != cudaSuccess) return launch_error(err, queued, temp, temp_size, stream);
  }
  return cudaSuccess;
}

}  // namespace zipccl::gpu
