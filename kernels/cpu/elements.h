// Internal helpers shared by the CPU encoder, decoder and classifier. Everything is templated
// on the codec so the element split of format.h folds to constants, and the per-block loops are
// written as straight passes over arrays (no per-element branches) that g++ -O3 vectorizes.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "zipccl/format.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// Hot per-message loops are compiled twice on x86-64, for the baseline ISA and for x86-64-v3
// (AVX2, BMI2, POPCNT); the loader picks the version the CPU supports. ZIPCCL_CPU_NO_CLONES
// builds the baseline only (tests use it to check both versions). Clang (14) cannot clone
// function templates, so clang builds (sanitizer, fuzzer) get the baseline only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(ZIPCCL_CPU_NO_CLONES)
#define ZIPCCL_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define ZIPCCL_CPU_CLONES
#endif

namespace zipccl::cpu {

template <Codec C>
using Elem = std::conditional_t<C == Codec::FP32, uint32_t, uint16_t>;

// Element i (little-endian) as raw bits.
template <Codec C>
inline uint32_t load(const uint8_t* p, uint64_t i) {
  Elem<C> v;
  std::memcpy(&v, p + i * sizeof v, sizeof v);
  return v;
}

template <Codec C>
inline void store(uint8_t* p, uint64_t i, uint32_t v) {
  const Elem<C> w = static_cast<Elem<C>>(v);
  std::memcpy(p + i * sizeof w, &w, sizeof w);
}

// Call f(std::integral_constant<Codec, C>) for the runtime codec c (BF16, FP16 or FP32), so f
// can instantiate templates on C.
template <Codec C>
using CodecTag = std::integral_constant<Codec, C>;
template <typename F>
inline decltype(auto) with_codec(Codec c, F&& f) {
  switch (c) {
    case Codec::BF16: return f(CodecTag<Codec::BF16>{});
    case Codec::FP16: return f(CodecTag<Codec::FP16>{});
    default: return f(CodecTag<Codec::FP32>{});
  }
}

// Exponent fields of nb elements starting at in, one byte each.
template <Codec C>
inline void load_exponents(const uint8_t* in, uint32_t nb, uint8_t* exps) {
  for (uint32_t i = 0; i < nb; ++i) exps[i] = static_cast<uint8_t>(elem_exponent(C, load<C>(in, i)));
}

// Statistic and cost of coding a block as one block.
struct BlockPlan {
  uint32_t base;
  uint32_t escapes;
  bool raw;
  uint32_t chunk_bytes;  // bytes this block puts in the escape section
};

// exp_code() in 8-bit arithmetic, so loops run 16 or 32 lanes per vector instead of 4 or 8.
// Equal to exp_code(e, base) for every exponent byte e and valid base (<= 249): e < base wraps
// to e - base + 256 >= 7, an escape, as in 32 bits.
inline uint8_t exp_code8(uint8_t e, uint8_t base) {
  const uint8_t d = static_cast<uint8_t>(e - base);
  return d < kWindow ? static_cast<uint8_t>(d + 1) : 0;
}

// refine: the encoder's base (refine_window_base()); without, window_base()'s alone, as the
// classifier estimates every codec with it.
inline BlockPlan plan_exponents(const Layout& L, const uint8_t* exps, uint32_t nb, bool refine) {
  // 16-bit partial sums over runs of 256 exponents (at most 255 * 256) vectorize twice as wide.
  uint32_t sum = 0, zeros = 0;
  for (uint32_t i0 = 0; i0 < nb; i0 += 256) {
    const uint32_t n = nb - i0 < 256 ? nb - i0 : 256;
    uint16_t s = 0, z = 0;
    for (uint32_t i = 0; i < n; ++i) {
      s = static_cast<uint16_t>(s + exps[i0 + i]);
      z = static_cast<uint16_t>(z + (exps[i0 + i] == 0));
    }
    sum += s;
    zeros += z;
  }
  BlockPlan p{};
  p.base = window_base(L.codec, sum, nb - zeros);
  // Escapes under base and, to refine it, what moving the window by one would add: per exponent
  // e, d = e - base (wrapping) is 0..6 inside the window; down adds d == 6 and removes d == 255,
  // up adds d == 0 and removes d == 7. Byte-wide counts keep the vector lanes bytes wide, over
  // runs of 96: within int8, and whole vectors (no scalar remainder per run).
  const uint8_t base = static_cast<uint8_t>(p.base);
  int32_t escapes = 0, down = 0, up = 0;
  for (uint32_t i0 = 0; i0 < nb; i0 += 96) {
    const uint32_t n = nb - i0 < 96 ? nb - i0 : 96;
    int8_t ce = 0, cd = 0, cu = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t d = static_cast<uint8_t>(exps[i0 + i] - base);
      ce = static_cast<int8_t>(ce + (d >= kWindow));
      if (refine) {
        cd = static_cast<int8_t>(cd + (d == kWindow - 1) - (d == 255));
        cu = static_cast<int8_t>(cu + (d == 0) - (d == kWindow));
      }
    }
    escapes += ce;
    down += cd;
    up += cu;
  }
  if (refine) {
    const uint32_t refined = refine_window_base(L.codec, p.base, down, up);
    escapes += refined < p.base ? down : refined > p.base ? up : 0;
    p.base = refined;
  }
  p.escapes = uint32_t(escapes);
  const uint32_t raw_chunk = raw_chunk_bytes(L, nb);
  p.raw = p.escapes > raw_chunk;
  p.chunk_bytes = p.raw ? raw_chunk : p.escapes;
  return p;
}

// Plan for coding nb elements at in (nb <= kBlockElems) as one block of L's codec.
inline BlockPlan plan_block(const Layout& L, const uint8_t* in, uint32_t nb) {
  uint8_t exps[kBlockElems];
  with_codec(L.codec, [&](auto tag) { load_exponents<decltype(tag)::value>(in, nb, exps); });
  return plan_exponents(L, exps, nb, false);
}

// Bit-plane packing: byte t of x holds a 0/1 bit; gather them into bit t of one byte, and back.
inline uint8_t pack_bits(uint64_t x) { return static_cast<uint8_t>((x * 0x0102040810204080ull) >> 56); }
constexpr uint64_t spread_bits(uint8_t b) {
  uint64_t x = b;
  x = (x | x << 28) & 0x0000000F0000000Full;  // nibbles to 32-bit halves
  x = (x | x << 14) & 0x0003000300030003ull;  // bit pairs to 16-bit quarters
  return (x | x << 7) & 0x0101010101010101ull;
}
// Pack groups x 8 symbols into bit-planes: byte gi of plane k holds bit k of symbols
// 8gi..8gi+7. With SSE2 (every x86-64) 16 symbols at a time: shifting 16-bit lanes left by 7 - k
// brings bit k of both bytes to bit 7, which movemask gathers.
inline void pack_planes(const uint8_t* syms, uint32_t groups, uint32_t planes_n, uint8_t* planes, uint64_t stride) {
  uint32_t gi = 0;
#if defined(__SSE2__)
  for (; gi + 2 <= groups; gi += 2) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(syms + gi * 8));
    for (uint32_t k = 0; k < planes_n; ++k) {
      const uint16_t m = static_cast<uint16_t>(_mm_movemask_epi8(_mm_slli_epi16(v, int(7 - k))));
      std::memcpy(planes + k * stride + gi, &m, 2);
    }
  }
#endif
  for (; gi < groups; ++gi) {
    uint64_t x;
    std::memcpy(&x, syms + gi * 8, 8);
    for (uint32_t k = 0; k < planes_n; ++k) planes[k * stride + gi] = pack_bits((x >> k) & 0x0101010101010101ull);
  }
}

// spread_bits() as a table: one load per plane byte in the decoder's inner loop.
struct SpreadTable {
  uint64_t v[256];
  constexpr SpreadTable() : v() {
    for (uint32_t b = 0; b < 256; ++b) v[b] = spread_bits(static_cast<uint8_t>(b));
  }
};
inline constexpr SpreadTable kSpread{};

// Escape flags (code 0: no bit in planes 0-2) of the up to 64 elements from group gi on, limited
// to the block's nb elements: bit p is element 8 * gi + p, since group gi + j is plane byte gi + j.
inline uint64_t escape_word(const uint8_t* planes, uint64_t stride, uint32_t gi, uint32_t nb) {
  const uint32_t n = nb - gi * 8;
  uint64_t coded = 0;
  if (n >= 64) {
    for (int k = 0; k < 3; ++k) {
      uint64_t w;
      std::memcpy(&w, planes + k * stride + gi, 8);
      coded |= w;
    }
    return ~coded;
  }
  for (uint32_t j = 0; j * 8 < n; ++j)
    coded |= uint64_t(planes[gi + j] | planes[stride + gi + j] | planes[2 * stride + gi + j]) << (8 * j);
  return ~coded & ((uint64_t(1) << n) - 1);
}

}  // namespace zipccl::cpu
