// A message's frame around its blocks' data: the header, and the zeroed padding of the fixed
// sections.
#pragma once

#include <cstdint>

#include "encode_shared.cuh"
#include "zipccl/format.h"

namespace zipccl::gpu::detail {
namespace {

// Zero the padding of the fixed sections (after the block table, after each residual plane's
// n_elems bytes, after each bit-plane's used bytes), as the CPU encoder does: thread t of
// `stride` threads. This and warp_put_header() are not inlined: inlined, they raise the
// small-launch kernel's spill stores from 180 to 374 bytes (ptxas -v, sm_90).
__device__ __noinline__ void zero_padding(const Layout& L, uint8_t* out, uint32_t t, uint32_t stride) {
  const uint64_t table_end = L.off_table + uint64_t(L.n_blocks) * kBlockEntryBytes;
  for (uint64_t i = table_end + t; i < L.off_res; i += stride) out[i] = 0;
  for (uint32_t r = 0; r < L.g.res_planes; ++r)
    for (uint64_t i = L.n_elems + t; i < L.res_stride; i += stride) out[L.off_res + r * L.res_stride + i] = 0;
  const uint64_t used = (L.n_elems + 7) / 8;
  for (uint32_t k = 0; k < L.g.bit_planes; ++k)
    for (uint64_t i = used + t; i < L.bit_stride; i += stride) out[L.off_bits + k * L.bit_stride + i] = 0;
}

// Write a message header with one warp: lane 0 builds it in shared memory, each lane stores
// four of its bytes.
__device__ __noinline__ void warp_put_header(uint8_t* out, EncShared& sh, const Layout& L, uint64_t esc_bytes,
                                const uint8_t* tail, bool checksum, uint32_t crc) {
  const uint32_t lane = threadIdx.x & 31;
  if (lane == 0) sh.header = make_header(L, esc_bytes, tail, checksum, crc);
  __syncwarp();
  const uint32_t w = reinterpret_cast<const uint32_t*>(&sh.header)[lane];
  if ((reinterpret_cast<uintptr_t>(out) & 3) == 0) {
    reinterpret_cast<uint32_t*>(out)[lane] = w;
  } else {
    for (int i = 0; i < 4; ++i) out[4 * lane + i] = static_cast<uint8_t>(w >> (8 * i));
  }
}

}  // namespace
}  // namespace zipccl::gpu::detail
