// CRC32C (Castagnoli): hardware instruction where the CPU has SSE4.2, table otherwise.
#include <cstring>

#include "zipccl/codec.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace zipccl {
namespace {

struct Table {
  uint32_t t[256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
      t[i] = c;
    }
  }
};

uint32_t crc_table(const uint8_t* p, size_t n, uint32_t c) {
  static const Table tab;
  for (size_t i = 0; i < n; ++i) c = tab.t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_hw(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
  }
  c = static_cast<uint32_t>(c64);
  for (; n; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  c = hw ? crc_hw(p, n, c) : crc_table(p, n, c);
#else
  c = crc_table(p, n, c);
#endif
  return ~c;
}

}  // namespace zipccl
