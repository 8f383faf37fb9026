// Datatype guess for untyped network buffers: estimate each codec's ratio on a few sampled
// windows with the real window choice, keep the best; Raw when nothing pays.
#include <initializer_list>

#include "elements.h"
#include "zipccl/codec.h"

namespace zipccl {

namespace {
constexpr size_t kSampleWindows = 4;
constexpr size_t kWindowBytes = 2048;    // 1024 bf16/fp16 or 512 fp32 values per window
constexpr double kMaxUsefulRatio = 0.95;
}  // namespace

Codec classify(const void* in_v, size_t n) {
  const auto* in = static_cast<const uint8_t*>(in_v);
  if (n < 64) return Codec::Raw;
  const size_t win = n < kWindowBytes ? n & ~size_t(3) : kWindowBytes;
  const size_t windows = n / win < kSampleWindows ? n / win : kSampleWindows;
  const size_t stride = ((n - win) / (windows > 1 ? windows - 1 : 1)) & ~size_t(3);

  Codec best = Codec::Raw;
  double best_ratio = kMaxUsefulRatio;
  for (Codec c : {Codec::BF16, Codec::FP16, Codec::FP32}) {
    const Layout L = make_layout(c, win);
    const uint32_t nb = static_cast<uint32_t>(L.n_elems);
    double bits = 0;
    for (size_t w = 0; w < windows; ++w) {
      cpu::BlockPlan p = cpu::plan_block(L, in + w * stride, nb);
      bits += double(nb) * (8.0 * L.g.res_planes + L.g.bit_planes) + 8.0 * p.chunk_bytes;
    }
    const double ratio = bits / (8.0 * double(win) * double(windows));
    if (ratio < best_ratio) {
      best_ratio = ratio;
      best = c;
    }
  }
  return best;
}

}  // namespace zipccl
