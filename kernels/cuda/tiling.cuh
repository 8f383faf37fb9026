// How the encode and decode kernels tile a message: CTAs, threads and blocks per tile, and the
// codecs' geometry as compile-time constants.
#pragma once

#include <cstdint>

#include "zipccl/format.h"

namespace zipccl::gpu::detail {

// One CTA (a "tile") codes MU * 8 KiB of original data: MU blocks of bf16/fp16, MU/2 (at
// least 1) of fp32, or a slice of a Raw payload. MU is 1 for small batches (more CTAs, lower
// latency); bulk batches use kEncodeBulkMU / kDecodeBulkMU (docs/gpu-codec.md, "Launch shapes", says
// why). In each block a thread owns 16 consecutive elements (kThreads per CTA), except
// in the bulk encode kernels for a known codec: 32 (128 threads per CTA; encode.cu's encode_pt()).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = kBlockElems / kThreads;
static_assert(kPerThread == 16, "a thread owns two 8-element groups of each block");
constexpr int kMaxUnitBlocks = 4;
constexpr uint64_t kBulkBytes = uint64_t(16) << 20;  // batches this large use the bulk MU
constexpr int kEncodeBulkMU = 4;
constexpr int kDecodeBulkMU = 2;
template <int MU>
constexpr uint32_t tile_bytes() {
  return MU * 8192u;
}
template <Codec C, int MU>
constexpr int unit_blocks() {
  return C == Codec::FP32 ? (MU > 1 ? MU / 2 : 1) : MU;
}

// Blocks per tile of codec c (unit_blocks()), and the tile's bytes of input.
template <int MU>
__device__ __forceinline__ uint32_t tile_blocks(Codec c) {
  return c == Codec::FP32 ? unit_blocks<Codec::FP32, MU>() : MU;
}
template <int MU>
__device__ __forceinline__ uint32_t unit_bytes(Codec c) {
  return c == Codec::FP32 ? tile_blocks<MU>(c) * kBlockElems * 4 : tile_bytes<MU>();
}

// The tile a CTA codes after this one, which its warp 1 stages while warp 0 looks back (an
// encode tile) or checks its tile (a bf16 decode tile staged by the bulk copy engine): the
// resident codec's next ticket (resident.cu's NextTile) when it is posted. staged(), read by
// every thread after that barrier, says whether stage() staged it. Launched kernels have none.
struct NoNext {
  static constexpr bool kStages = false;
  __device__ void stage() const {}
  __device__ bool staged() const { return false; }
};

// format.h's geometry() (elem_bytes, R, K, exp_max) under short names, for the kernels' array
// sizes and unrolled loops.
template <Codec C>
struct Geom {
  static_assert(C == Codec::BF16 || C == Codec::FP16 || C == Codec::FP32, "coded codecs only");
  static constexpr uint32_t EB = geometry(C).elem_bytes;
  static constexpr uint32_t R = geometry(C).res_planes;
  static constexpr uint32_t K = geometry(C).bit_planes;
  static constexpr uint32_t kExpMax = geometry(C).exp_max;
};

}  // namespace zipccl::gpu::detail
