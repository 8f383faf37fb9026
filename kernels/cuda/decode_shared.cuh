// The decode kernels' shared memory: the tile's header, entries and scans, and the dynamic
// staging area of its blocks' sections and short escape chunks.
#pragma once

#include <cstdint>

#include "async_copy.cuh"
#include "crc32c.cuh"
#include "tiling.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

struct DecShared {
  uint32_t scan[kWarps][kMaxUnitBlocks / 2];
  int flag;
  int status;
  uint32_t plan;  // bf16 bulk tiles: what warp 0's checks found (decode_unit())
  Layout L;
  Header header;
  // Block entries of the tile, for both tile shapes (bf16/fp16: MU blocks, fp32: MU/2), read
  // before the codec is known: entry[s][m + 1] is block u*M+m's, entry[s][0] the one before.
  BlockEntry entry[2][kMaxUnitBlocks + 1];
  CrcShared crc;
  alignas(16) uint32_t patch[kThreads][4];  // each thread's exponent bytes, for lanes::decode16()
  uint64_t mbar[kMaxUnitBlocks];             // bulk copy groups (decode_unit())
  uint32_t bulk_tiles;  // tiles the CTA staged in bulk: the n-th (from 0) waits for phases of parity n & 1
};

// A bf16 decode tile staged ahead by the bulk copy engine while the CTA codes the tile before it
// (the resident codec's next ticket: resident.cu's NextTile, decode_tile.cuh's stage_ahead()): its
// header and block entries as read then, which the tile takes instead of reading them again, and
// the barriers of its copies, a phase per tile staged (set up by thread 0 at the CTA's start).
struct alignas(16) DecAhead {
  Header header;
  BlockEntry entry[kMaxUnitBlocks + 1];  // as DecShared's entry[0]
  uint64_t mbar[kMaxUnitBlocks];
  uint32_t tiles;  // tiles staged ahead: the n-th (from 0) waits for phases of parity n & 1
};

// Thread 0, once at the CTA's start, before the barrier that precedes the first tile's reads.
__device__ __forceinline__ void init_shared(DecShared& sh) {
  if constexpr (has_bulk_copy()) {
    if (threadIdx.x == 0) {
      for (int m = 0; m < kMaxUnitBlocks; ++m) mbar_init(&sh.mbar[m]);
      sh.bulk_tiles = 0;
    }
  }
}

// Escape chunks of coded blocks up to this length are staged in shared memory with the
// planes; longer ones (raw blocks' spills, escape-heavy blocks) are read from global memory.
constexpr uint32_t kEscStage = 512;

// Dynamic shared memory of a decode tile: the staged residual and bit-plane bytes of its
// blocks (the largest codec decides: fp32 residuals for MU <= 2, fp16 planes above), then
// kEscStage bytes per block for its escape chunk.
template <int MU>
constexpr uint32_t decode_sections_bytes() {
  constexpr uint32_t f16 = MU * (kBlockElems + 6 * kBlockElems / 8);
  constexpr uint32_t f32 = unit_blocks<Codec::FP32, MU>() * (3 * kBlockElems + 3 * kBlockElems / 8);
  return f16 > f32 ? f16 : f32;
}
template <int MU>
constexpr uint32_t decode_stage_bytes() {
  return decode_sections_bytes<MU>() + MU * kEscStage;
}

}  // namespace
}  // namespace zipccl::gpu::detail
