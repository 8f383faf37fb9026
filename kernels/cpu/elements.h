// Internal helpers shared by the CPU encoder, decoder and classifier.
#pragma once

#include <cstdint>
#include <cstring>

#include "zipccl/format.h"

namespace zipccl::cpu {

// Load element i (little-endian) as raw bits.
inline uint32_t load_elem(const uint8_t* p, uint32_t elem_bytes, uint64_t i) {
  if (elem_bytes == 2) {
    uint16_t v;
    std::memcpy(&v, p + i * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p + i * 4, 4);
  return v;
}

inline void store_elem(uint8_t* p, uint32_t elem_bytes, uint64_t i, uint32_t v) {
  if (elem_bytes == 2) {
    uint16_t w = static_cast<uint16_t>(v);
    std::memcpy(p + i * 2, &w, 2);
  } else {
    std::memcpy(p + i * 4, &v, 4);
  }
}

// Statistic and cost of coding nb elements starting at element `first` as one block.
struct BlockPlan {
  uint32_t base;
  uint32_t escapes;
  bool raw;
  uint32_t chunk_bytes;  // bytes this block puts in the escape section
};

inline BlockPlan plan_block(const Layout& L, const uint8_t* in, uint64_t first, uint32_t nb) {
  uint64_t sum = 0;
  uint32_t cnt = 0;
  for (uint32_t i = 0; i < nb; ++i) {
    uint32_t e = elem_exponent(L.codec, load_elem(in, L.g.elem_bytes, first + i));
    sum += e;
    cnt += e != 0;
  }
  BlockPlan p{};
  p.base = window_base(L.codec, sum, cnt);
  for (uint32_t i = 0; i < nb; ++i)
    p.escapes += exp_code(elem_exponent(L.codec, load_elem(in, L.g.elem_bytes, first + i)), p.base) == 0;
  uint32_t raw_chunk = raw_chunk_bytes(L, nb);
  p.raw = p.escapes > raw_chunk;
  p.chunk_bytes = p.raw ? raw_chunk : p.escapes;
  return p;
}

}  // namespace zipccl::cpu
