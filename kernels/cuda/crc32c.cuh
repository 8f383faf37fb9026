// CRC32C of a byte range by one CTA: a CRC per thread segment, combined as zlib's
// crc32_combine does (multiplication by x^(8 len) modulo the polynomial). Optional feature;
// its throughput is that of one CTA.
#pragma once

#include <cstdint>

#include "tiling.cuh"

namespace zipccl::gpu::detail {

constexpr uint32_t kCrcPoly = 0x82F63B78u;

__device__ __forceinline__ uint32_t multmodp(uint32_t a, uint32_t b) {  // a != 0
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kCrcPoly : b >> 1;
  }
  return p;
}

__device__ __forceinline__ uint32_t x8nmodp(uint64_t n) {  // x^(8n) mod P
  uint32_t p = 1u << 31, sq = 1u << 30;                    // x^0, x^1
  for (int i = 0; i < 3; ++i) sq = multmodp(sq, sq);
  while (n) {
    if (n & 1) p = multmodp(sq, p);
    sq = multmodp(sq, sq);
    n >>= 1;
  }
  return p;
}

struct CrcShared {
  uint32_t table[256];
  uint32_t part[kThreads];
};

// Every thread gets crc32c(p, n).
__device__ __forceinline__ uint32_t cta_crc32c(const uint8_t* p, uint64_t n, CrcShared& sh) {
  {
    uint32_t c = threadIdx.x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kCrcPoly & (0u - (c & 1)));
    sh.table[threadIdx.x] = c;
  }
  __syncthreads();
  const uint64_t seg = (n + kThreads - 1) / kThreads;
  const uint64_t lo = seg * threadIdx.x < n ? seg * threadIdx.x : n;
  const uint64_t hi = lo + seg < n ? lo + seg : n;
  uint32_t c = ~0u;
  for (uint64_t i = lo; i < hi; ++i) c = sh.table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  sh.part[threadIdx.x] = ~c;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t crc = sh.part[0];
    const uint32_t xseg = seg ? x8nmodp(seg) : 0;
    for (int t = 1; t < kThreads; ++t) {
      const uint64_t a = seg * t < n ? seg * t : n, z = a + seg < n ? a + seg : n;
      if (z == a) break;
      crc = multmodp(z - a == seg ? xseg : x8nmodp(z - a), crc) ^ sh.part[t];
    }
    sh.part[0] = crc;
  }
  __syncthreads();
  const uint32_t crc = sh.part[0];
  __syncthreads();
  return crc;
}

}  // namespace zipccl::gpu::detail
