// Internal helpers shared by the CPU encoder, decoder and classifier. Everything is templated
// on the codec so the element split of format.h folds to constants, and the per-block loops are
// written as straight passes over arrays (no per-element branches) that g++ -O3 vectorizes.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "zipccl/format.h"

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

inline BlockPlan plan_exponents(const Layout& L, const uint8_t* exps, uint32_t nb) {
  // nb <= 4096 exponents of at most 255: 32-bit sums cannot overflow.
  uint32_t sum = 0, cnt = 0;
  for (uint32_t i = 0; i < nb; ++i) {
    sum += exps[i];
    cnt += exps[i] != 0;
  }
  BlockPlan p{};
  p.base = window_base(L.codec, sum, cnt);
  uint32_t inside = 0;
  for (uint32_t i = 0; i < nb; ++i) inside += exp_code(exps[i], p.base) != 0;
  p.escapes = nb - inside;
  const uint32_t raw_chunk = raw_chunk_bytes(L, nb);
  p.raw = p.escapes > raw_chunk;
  p.chunk_bytes = p.raw ? raw_chunk : p.escapes;
  return p;
}

// Plan for coding nb elements at in (nb <= kBlockElems) as one block of L's codec.
inline BlockPlan plan_block(const Layout& L, const uint8_t* in, uint32_t nb) {
  uint8_t exps[kBlockElems];
  with_codec(L.codec, [&](auto tag) { load_exponents<decltype(tag)::value>(in, nb, exps); });
  return plan_exponents(L, exps, nb);
}

// Bit-plane packing: byte t of x holds a 0/1 bit; gather them into bit t of one byte, and back.
inline uint8_t pack_bits(uint64_t x) { return static_cast<uint8_t>((x * 0x0102040810204080ull) >> 56); }
inline uint64_t spread_bits(uint8_t b) {
  uint64_t x = b;
  x = (x | x << 28) & 0x0000000F0000000Full;  // nibbles to 32-bit halves
  x = (x | x << 14) & 0x0003000300030003ull;  // bit pairs to 16-bit quarters
  return (x | x << 7) & 0x0101010101010101ull;
}

}  // namespace zipccl::cpu
