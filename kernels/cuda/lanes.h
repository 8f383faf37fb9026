// The GPU codec's per-thread coding and decoding of 16 bf16/fp16 elements (8 32-bit words, two
// elements per word as 16-bit lanes), written for the fewest instructions per element; also the
// window refinement's counts, for fp32 too.
// Host-compilable (portable fallbacks for the intrinsics), so that the CPU tests check them
// exhaustively against format.h's scalar definitions.
#pragma once

#include <cstdint>

#include "zipccl/format.h"

namespace zipccl::lanes {

// __byte_perm (PRMT): byte i of the result is byte (s >> 4i) & 7 of {b:a}.
ZIPCCL_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, s);
#else
  const uint64_t x = (uint64_t(b) << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((x >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}

// Per 16-bit lane: min((a + b) mod 2^16, c). One instruction on sm_90 (DPX).
ZIPCCL_HD uint32_t add_min_u16x2(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  return __viaddmin_u16x2(a, b, c);
#else
  uint32_t r = 0;
  for (int h = 0; h < 32; h += 16) {
    const uint32_t s = ((a >> h) + (b >> h)) & 0xFFFF, m = (c >> h) & 0xFFFF;
    r |= (s < m ? s : m) << h;
  }
  return r;
#endif
}

template <Codec C>
struct Lanes {
  static_assert(C == Codec::BF16 || C == Codec::FP16, "two elements per word");
  static constexpr uint32_t kShift = C == Codec::BF16 ? 7 : 10;
  static constexpr uint32_t kExp = C == Codec::BF16 ? 0x00FF00FFu : 0x001F001Fu;
  static constexpr int K = geometry(C).bit_planes;
};

template <Codec C>
ZIPCCL_HD uint32_t exps(uint32_t w) {
  return (w >> Lanes<C>::kShift) & Lanes<C>::kExp;
}

// Exponent sum (low 20 bits) and nonzero-exponent count (from bit kCountShift) of the 16
// elements, for the block's window base. Per lane at most 8 * 255 and 8: no carries.
constexpr uint32_t kCountShift = 20;
template <Codec C>
ZIPCCL_HD uint32_t stats16(const uint32_t (&w)[8]) {
  uint32_t sum = 0, nz = 0;
  for (int i = 0; i < 8; ++i) {
    const uint32_t e = exps<C>(w[i]);
    sum += e;
    nz += add_min_u16x2(e, 0, 0x00010001u);
  }
  return (sum & 0xFFFF) + (sum >> 16) + (((nz & 0xFFFF) + (nz >> 16)) << kCountShift);
}

// Bit p of eight nibble-packed elements (element j in nibble 2 (j % 4) + j / 4, i.e. byte j % 4,
// high nibble for j >= 4) as bits 24..31, by one multiplication: the shifted copies of the
// masked bits never collide (checked for every input by the tests).
ZIPCCL_HD uint32_t gather8(uint32_t x, int p) {
  return (x & (0x11111111u << p)) * (0x01020408u >> p);
}
// A 16-bit plane word (elements 0-7 from x0, 8-15 from x1) in the low half; the high half is
// unspecified.
ZIPCCL_HD uint32_t plane16(uint32_t x0, uint32_t x1, int p) {
  return byte_perm(gather8(x0, p), gather8(x1, p), 0x7773);
}
// Nibble-pack the low nibbles of the 16-bit lanes of four words (elements 0..7 in order).
ZIPCCL_HD uint32_t nibbles(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  return byte_perm(c0, c1, 0x6420) | byte_perm(c2, c3, 0x6420) << 4;
}

// Per 16-bit lane of word w: min(e - base + 1 mod 2^16, 8) for its exponent e, given
// k = code_addend(base): the code 1..7 inside the window; 0 (e = base - 1) or 8 (everything
// else, e < base wrapping high) outside, both with zero low three bits.
ZIPCCL_HD uint32_t code_addend(uint32_t base) {
  return ((1u - base) & 0xFFFF) * 0x00010001u;
}
template <Codec C>
ZIPCCL_HD uint32_t lane_codes(uint32_t w, uint32_t k) {
  return add_min_u16x2(exps<C>(w), k, 0x00080008u);
}

// Escapes among the 16 elements under window base `base` (code16()'s mask, counted): two DPX
// instructions per word, for the codec classifier.
template <Codec C>
ZIPCCL_HD uint32_t escapes16(const uint32_t (&w)[8], uint32_t base) {
  const uint32_t k = code_addend(base);
  uint32_t coded = 0;  // per lane
  for (int i = 0; i < 8; ++i) coded += add_min_u16x2(lane_codes<C>(w[i], k) & 0x00070007u, 0, 0x00010001u);
  return 16 - (coded & 0xFFFF) - (coded >> 16);
}

// What moving the window of base `base` down (*down) or up (*up) by one would add in escapes
// among 16 elements whose exponents are the 16-bit lanes of e, each plus 16, as
// refine_window_base() weighs them: per lane, min(e - (base + k) mod 2^16, 1) is 0 exactly for
// e = base + k, so down = c(base + 6) - c(base - 1) and up = c(base) - c(base + 7) are
// differences of such sums. Four DPX instructions per word.
ZIPCCL_HD void shift_escapes_lanes(const uint32_t (&e)[8], uint32_t base, uint32_t* down, uint32_t* up) {
  const auto at = [base](uint32_t k) { return ((0u - base - k) & 0xFFFF) * 0x00010001u; };
  const uint32_t below = at(~0u), top = at(kWindow - 1), first = at(0), above = at(kWindow), one = 0x00010001u;
  uint32_t d = 0, u = 0;  // per lane: 0..2 per word, no carries
  for (int i = 0; i < 8; ++i) {
    d += add_min_u16x2(e[i], below, one) + one - add_min_u16x2(e[i], top, one);
    u += add_min_u16x2(e[i], above, one) + one - add_min_u16x2(e[i], first, one);
  }
  *down = (d & 0xFFFF) + (d >> 16);
  *up = (u & 0xFFFF) + (u >> 16);
}
// The same for 16 bf16/fp16 elements (8 words of two)...
template <Codec C>
ZIPCCL_HD void shift_escapes16(const uint32_t (&w)[8], uint32_t base, uint32_t* down, uint32_t* up) {
  uint32_t e[8];
  for (int i = 0; i < 8; ++i) e[i] = exps<C>(w[i]);
  shift_escapes_lanes(e, base, down, up);
}
// ... and for 16 fp32 elements (16 words), their exponents paired into lanes.
ZIPCCL_HD void shift_escapes16_fp32(const uint32_t (&w)[16], uint32_t base, uint32_t* down, uint32_t* up) {
  uint32_t e[8];
  for (int i = 0; i < 8; ++i) e[i] = ((w[2 * i] >> 23) & 0xFF) | ((w[2 * i + 1] >> 7) & 0xFF0000);
  shift_escapes_lanes(e, base, down, up);
}

// Code 16 elements under window base `base`: residual bytes (res, elements in order), the K
// bit-planes (low 16 bits of planes[k]; code bits 0-2, then fp16's m8, m9 and sign) and the
// escape mask (bit j: element j is outside the window). As format.h's exp_code(),
// elem_residual() and fp16_extra().
template <Codec C>
ZIPCCL_HD uint32_t code16(const uint32_t (&w)[8], uint32_t base, uint32_t (&res)[4],
                          uint32_t (&planes)[Lanes<C>::K]) {
  const uint32_t k = code_addend(base);
  uint32_t c[8];
  for (int i = 0; i < 8; ++i) c[i] = lane_codes<C>(w[i], k);
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = byte_perm(w[2 * i], w[2 * i + 1], 0x6420);  // low bytes of 4 elements
    if constexpr (C == Codec::BF16) {
      const uint32_t hi = byte_perm(w[2 * i], w[2 * i + 1], 0x7531);
      res[i] = (lo & 0x7F7F7F7Fu) | (hi & 0x80808080u);  // mantissa, sign
    } else {
      res[i] = lo;
    }
  }
  const uint32_t x0 = nibbles(c[0], c[1], c[2], c[3]), x1 = nibbles(c[4], c[5], c[6], c[7]);
  for (int p = 0; p < 3; ++p) planes[p] = plane16(x0, x1, p);
  if constexpr (C == Codec::FP16) {  // m8, m9 (high byte bits 0, 1) and sign (bit 7)
    uint32_t hi[4];
    for (int i = 0; i < 4; ++i) hi[i] = byte_perm(w[2 * i], w[2 * i + 1], 0x7531);
    const uint32_t m0 = (hi[0] & 0x0F0F0F0Fu) | ((hi[1] << 4) & 0xF0F0F0F0u);
    const uint32_t m1 = (hi[2] & 0x0F0F0F0Fu) | ((hi[3] << 4) & 0xF0F0F0F0u);
    const uint32_t s0 = ((hi[0] >> 7) & 0x0F0F0F0Fu) | ((hi[1] >> 3) & 0xF0F0F0F0u);
    const uint32_t s1 = ((hi[2] >> 7) & 0x0F0F0F0Fu) | ((hi[3] >> 3) & 0xF0F0F0F0u);
    planes[3] = plane16(m0, m1, 0);
    planes[4] = plane16(m0, m1, 1);
    planes[5] = plane16(s0, s1, 0);
  }
  return ~(planes[0] | planes[1] | planes[2]) & 0xFFFFu;
}

// Four bits to four byte lanes (bit i to bit 0 of byte i), by one multiplication.
ZIPCCL_HD uint32_t spread4(uint32_t n) {
  return ((n & 0xF) * 0x00204081u) & 0x01010101u;
}

// Index of the lowest set bit of x != 0.
ZIPCCL_HD uint32_t lowest_bit(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __ffs(x) - 1;
#else
  return static_cast<uint32_t>(__builtin_ctz(x));
#endif
}

// Four words to and from 16 aligned bytes: one vector access on the GPU.
ZIPCCL_HD void store16(uint32_t* dst, const uint32_t (&w)[4]) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
#else
  for (int i = 0; i < 4; ++i) dst[i] = w[i];
#endif
}
ZIPCCL_HD void load16(const uint32_t* src, uint32_t (&w)[4]) {
#if defined(__CUDA_ARCH__)
  const uint4 v = *reinterpret_cast<const uint4*>(src);
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
#else
  for (int i = 0; i < 4; ++i) w[i] = src[i];
#endif
}

// The inverse of code16() for a coded block: the 16 elements (words as code16() takes them)
// from the K bit-planes (low 16 bits), the residual words and the window base; elements with
// code 0 take their exponents from chunk[k_esc], chunk[k_esc + 1], ... in element order. Four
// elements at a time as byte lanes. `patch` is 16 bytes of the caller's, 16-byte aligned (on the
// GPU this thread's slot in shared memory). Returns false when an escape byte exceeds exp_max
// (out is then unspecified).
template <Codec C>
ZIPCCL_HD bool decode16(const uint32_t (&p)[Lanes<C>::K], const uint32_t (&res)[4], uint32_t base,
                        const uint8_t* chunk, uint32_t k_esc, uint32_t* patch, uint32_t (&out)[8]) {
  const uint32_t escm = ~(p[0] | p[1] | p[2]) & 0xFFFFu;
  // Exponent bytes of elements 4i..4i+3; escapes count as code 1 until patched, so that
  // code - 1 + base never borrows or carries between bytes (base + 6 <= exp_max).
  uint32_t e4[4];
  for (int i = 0; i < 4; ++i)
    e4[i] = (spread4(p[0] >> (4 * i)) | spread4(p[1] >> (4 * i)) << 1 | spread4(p[2] >> (4 * i)) << 2 |
             spread4(escm >> (4 * i))) - 0x01010101u + base * 0x01010101u;
  // Escapes are rare per thread (one in ~70 elements of N(0,1) data), but a warp passes as
  // often as its lane with the most: one byte store per escape into the exponent bytes laid out
  // in `patch` (byte t is element t's), instead of selecting among the four words in registers.
  bool bad = false;
  if (escm) {
    store16(patch, e4);
    uint8_t* bytes = reinterpret_cast<uint8_t*>(patch);
    for (uint32_t m = escm; m; m &= m - 1) {
      const uint32_t x = chunk[k_esc++];
      bad |= x > geometry(C).exp_max;
      bytes[lowest_bit(m)] = static_cast<uint8_t>(x);
    }
    load16(patch, e4);
  }
  for (int i = 0; i < 4; ++i) {
    uint32_t lo, hi;  // low and high bytes of the four elements
    if constexpr (C == Codec::BF16) {
      lo = ((e4[i] & 0x01010101u) << 7) | (res[i] & 0x7F7F7F7Fu);
      hi = (res[i] & 0x80808080u) | ((e4[i] >> 1) & 0x7F7F7F7Fu);
    } else {
      lo = res[i];
      hi = (e4[i] << 2) | spread4(p[3] >> (4 * i)) | spread4(p[4] >> (4 * i)) << 1 |
           spread4(p[5] >> (4 * i)) << 7;
    }
    out[2 * i] = byte_perm(lo, hi, 0x5140);
    out[2 * i + 1] = byte_perm(lo, hi, 0x7362);
  }
  return !bad;
}

}  // namespace zipccl::lanes
