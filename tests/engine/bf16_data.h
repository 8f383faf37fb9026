// Test data for the engine's codec tests: n bytes of bf16 N(0, 0.02^2), as gradients look.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace zipccl::enginetest {

inline std::vector<uint8_t> bf16_data(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, 0.02f);
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i + 1 < n; i += 2) {
    const float f = d(g);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    b[i] = uint8_t(u >> 16);
    b[i + 1] = uint8_t(u >> 24);
  }
  return b;
}

}  // namespace zipccl::enginetest
