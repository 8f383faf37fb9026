// Synthetic tensors for the window study, the benchmarks and the tests: i.i.d. samples of a
// distribution, rounded to the element type the way frameworks do (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "zipccl/format.h"

namespace zipccl::tools {

enum class Dist { Gaussian, Laplace, StudentT3 };
const char* dist_name(Dist d);

// elems values of scale `scale` (sigma, Laplace b, or the t-distribution's scale) as codec c's
// element type (BF16, FP16 or FP32), deterministic for a given seed with this standard library.
std::vector<uint8_t> synth(Codec c, Dist d, double scale, size_t elems, uint64_t seed);

}  // namespace zipccl::tools
