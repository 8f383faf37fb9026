// What the GPU benchmarks share: a CUDA check that exits, order statistics, and test data.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "zipccl/format.h"

namespace zipccl::bench {

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

// Whether a CUDA device is there; without one, says so for `bench` (the device scripts look for
// "no CUDA device") and the benchmark exits 0 having measured nothing.
inline bool have_cuda_device(const char* bench) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return true;
  printf("%s: no CUDA device, nothing measured\n", bench);
  return false;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
inline double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * v.size()))];
}

// N(0, sigma^2) as bf16, fp16 or fp32, generated on the host once.
inline std::vector<uint8_t> gaussian(Codec c, size_t bytes, uint32_t seed, float sigma) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, sigma);
  std::vector<uint8_t> b(bytes);
  const size_t eb = c == Codec::FP32 ? 4 : 2;
  for (size_t i = 0; i + eb <= bytes; i += eb) {
    float f = d(g);
    uint32_t u;
    memcpy(&u, &f, 4);
    if (c == Codec::FP32) {
      memcpy(&b[i], &u, 4);
    } else if (c == Codec::BF16) {
      uint16_t h = uint16_t(u >> 16);
      memcpy(&b[i], &h, 2);
    } else {
      const int e = int((u >> 23) & 0xFF) - 127 + 15;
      uint16_t h = uint16_t((u >> 16) & 0x8000);
      if (e > 0 && e < 31) h |= uint16_t((e << 10) | ((u >> 13) & 0x3FF));
      memcpy(&b[i], &h, 2);
    }
  }
  return b;
}

}  // namespace zipccl::bench
