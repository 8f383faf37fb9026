// Test data of the GPU codec's suites: values of each codec's type, Gaussian with escapes or
// escape-free; random bytes and the float conversions are the codec tests' (tests/codec).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>

#include "test_util.h"
#include "zipccl/format.h"

namespace zipccl::gputest {

using test::Bytes;
using test::random_bytes;

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
      const uint16_t h = uint16_t(test::float_to_elem(c, f));
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

}  // namespace zipccl::gputest
