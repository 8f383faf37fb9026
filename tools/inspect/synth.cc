#include "synth.h"

#include <cstring>
#include <random>

#include "fp16.h"

namespace zipccl::tools {

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::Gaussian: return "gaussian";
    case Dist::Laplace: return "laplace";
    case Dist::StudentT3: return "student-t3";
  }
  return "?";
}

std::vector<uint8_t> synth(Codec c, Dist d, double scale, size_t elems, uint64_t seed) {
  const uint32_t es = geometry(c).elem_bytes;
  std::vector<uint8_t> out(elems * es);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::exponential_distribution<double> expo(1.0);
  std::student_t_distribution<double> student(3.0);
  for (size_t i = 0; i < elems; ++i) {
    double x;
    switch (d) {
      case Dist::Gaussian: x = normal(rng); break;
      case Dist::Laplace: x = (rng() & 1 ? 1.0 : -1.0) * expo(rng); break;
      default: x = student(rng); break;
    }
    const float f = static_cast<float>(x * scale);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (c == Codec::BF16) {
      u = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // round to nearest even (finite inputs)
    } else if (c == Codec::FP16) {
      u = float_to_fp16(f);
    }
    std::memcpy(out.data() + i * es, &u, es);
  }
  return out;
}

}  // namespace zipccl::tools
