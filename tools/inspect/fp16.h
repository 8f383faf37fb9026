// IEEE half-precision conversions in plain integer arithmetic (clang 14 has no _Float16 on x86).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace zipccl::tools {

inline double fp16_to_double(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
  return h >> 15 ? -v : v;
}

// Round to nearest even, as a C cast to _Float16 does.
inline uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7E00 | ((a >> 13) & 0x3FF);  // NaN, payload kept
  if (a >= 0x477FF000) return sign | 0x7C00;                       // >= 65520: infinity
  if (a < 0x38800000) {                                            // below 2^-14: subnormal
    float x;
    std::memcpy(&x, &a, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(x * 16777216.0f));  // exact scaling
  }
  uint32_t r = a - 0x38000000;  // rebias the exponent from 127 to 15
  r += 0xFFF + ((r >> 13) & 1);
  return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace zipccl::tools
