// The encode kernels' shared memory: one struct for a tile's phases (classifier, window bases,
// escape scans, look-back) and for the finisher (header, CRC).
#pragma once

#include <cstdint>

#include "crc32c.cuh"
#include "encode_plan.cuh"
#include "tiling.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

struct EncShared {
  Plan plan;  // in shared memory: the layout is too large to keep in registers
  uint32_t red[kWarps];
  uint32_t base[kMaxUnitBlocks];  // window base of each block of the tile
  uint32_t scan[kWarps][kMaxUnitBlocks / 2];
  // Each thread's escape mask per block (encode_unit): 16 bits, or 32 in 128-thread CTAs.
  uint16_t escm[kMaxUnitBlocks][kThreads];
  uint64_t bcast;
  uint32_t tile_elems;
  int flag;
  int codec;
  union {
    Header header;
    CrcShared crc;
    struct {
      uint32_t sum[kWarps][3];  // exponent sum | nonzero count << lanes::kCountShift
      uint32_t esc[kWarps][3];
    } cls;
  };
};

}  // namespace
}  // namespace zipccl::gpu::detail
