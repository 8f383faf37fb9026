// Test data of the GPU codec's suites: values of each codec's type, Gaussian or escape-free, and
// random bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "zipccl/format.h"

namespace zipccl::gputest {

using Bytes = std::vector<uint8_t>;

inline uint16_t bf16_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

inline uint16_t fp16_of(float f) {  // round-toward-zero conversion, enough for test data
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t s = (u >> 16) & 0x8000;
  const int e = int((u >> 23) & 0xFF) - 127 + 15;
  if (e <= 0) return static_cast<uint16_t>(s);
  if (e >= 31) return static_cast<uint16_t>(s | 0x7C00);
  return static_cast<uint16_t>(s | (e << 10) | ((u >> 13) & 0x3FF));
}

// Gaussian values of the codec's type with a fraction of exact zeros (escapes), as bytes.
inline Bytes gaussian(Codec c, size_t nbytes, uint32_t seed, float sigma = 0.02f, double zeros = 0.02) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, sigma);
  std::uniform_real_distribution<double> u(0, 1);
  Bytes b(nbytes);
  const size_t eb = c == Codec::FP32 ? 4 : 2;
  for (size_t i = 0; i + eb <= nbytes; i += eb) {
    const float f = u(g) < zeros ? 0.f : d(g);
    if (c == Codec::FP32) {
      std::memcpy(&b[i], &f, 4);
    } else {
      const uint16_t h = c == Codec::FP16 ? fp16_of(f) : bf16_of(f);
      std::memcpy(&b[i], &h, 2);
    }
  }
  for (size_t i = nbytes / eb * eb; i < nbytes; ++i) b[i] = static_cast<uint8_t>(g());
  return b;
}

// Random signs and mantissas under one exponent (the format's 1.0): no escapes at all.
inline Bytes escape_free(Codec c, size_t nbytes, uint32_t seed) {
  std::mt19937 g(seed);
  Bytes b(nbytes);
  const size_t eb = c == Codec::FP32 ? 4 : 2;
  for (size_t i = 0; i + eb <= nbytes; i += eb) {
    const uint32_t r = g();
    const uint32_t v = c == Codec::FP32   ? (r & 0x807FFFFFu) | (127u << 23)
                       : c == Codec::FP16 ? (r & 0x83FFu) | (15u << 10)
                                          : (r & 0x807Fu) | (127u << 7);
    std::memcpy(&b[i], &v, eb);
  }
  for (size_t i = nbytes / eb * eb; i < nbytes; ++i) b[i] = static_cast<uint8_t>(g());
  return b;
}

inline Bytes random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(g());
  return b;
}

}  // namespace zipccl::gputest
