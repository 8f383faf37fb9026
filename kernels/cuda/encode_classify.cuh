// The auto codec's choice, bit-exact with zipccl::classify(): the same sampled windows, the same
// block plan per window, its arithmetic in integers (equivalent: pick.h). An item's tile 0
// classifies it; its other tiles wait for that choice.
#pragma once

#include <cstdint>

#include "cta.cuh"
#include "encode_shared.cuh"
#include "encode_window.cuh"
#include "launch.cuh"
#include "lanes.h"
#include "pick.h"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

// The codec of the n bytes at `in`, in every thread of the CTA (kThreads: two warps per window).
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

}  // namespace
}  // namespace zipccl::gpu::detail
