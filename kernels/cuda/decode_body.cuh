// What a decode does per tile: read the header and block entries, decode the tile's blocks (or
// check the header, the item's last tile), and publish the item's result from the tile that
// finishes it. decode.cu's kernels launch it one CTA per tile; the resident codec (resident.cu)
// runs it on each tile a CTA of its claims.
#pragma once

#include <cstdint>

#include "crc32c.cuh"
#include "cta.cuh"
#include "decode_check.cuh"
#include "decode_shared.cuh"
#include "decode_tile.cuh"
#include "launch.cuh"
#include "tiling.cuh"
#include "trace.cuh"

namespace zipccl::gpu::detail {
namespace {

// Without a reported error the header passed the checker tile's check, so its fields are the
// message's.
__device__ void finalize(const Launch& P, int item, DecShared& sh) {
  const LaunchItem& it = P.items[item];
  const uint32_t err = P.item_err[item];
  __syncthreads();  // every thread has read the error word before thread 0 clears it
  Status s = err ? static_cast<Status>(~err & 15) : Status::kOk;
  const uint64_t orig = sh.header.orig_bytes;
  if (s == Status::kOk && (sh.header.flags & kFlagChecksum) && cta_crc32c(it.out, orig, sh.crc) != sh.header.checksum)
    s = Status::kBadChecksum;
  if (threadIdx.x == 0) {
    P.item_err[item] = 0;
    P.item_done[item] = 0;
    publish_result(P, item, orig, s, err ? Codec::Raw : static_cast<Codec>(sh.header.codec), false);
  }
}

// One tile (CTA) of item `item`: tile b of it. What decode_kernel runs per CTA, and the
// resident codec per tile it claims (resident.cu). sh and staged: the CTA's shared memory.
// FINISH: the item's last tile publishes (small launches and the resident codec; bulk launches
// leave it to decode_finish_kernel). `prestaged`: next.decode_ahead() holds the tile, staged ahead
// (decode_tile.cuh's stage_ahead()); next: the tile to stage after it (tiling.cuh's NoNext).
template <int MU, bool FINISH = MU == 1, typename Next = NoNext>
__device__ __forceinline__ void decode_tile(const Launch& P, int item, uint32_t b, DecShared& sh, uint4* staged,
                                            bool prestaged = false, Next next = {}) {
  const LaunchItem& it = P.items[item];
  const bool checker = b == it.tiles - 1;  // the item's last tile checks its header
  // The header and the block entries of this tile (and the one before it, for the tiling
  // check) in one round trip: the table of a coded message starts at byte 128 whatever its
  // codec, so the entries of both tile shapes are read before the codec is known (the same
  // blocks when MU = 1). Reads stay within the bytes received; entries past the table are
  // never used. A tile staged ahead takes them from there (a bf16 tile: one shape), once its
  // copies have landed, so that its staging area is free for reuse however the tile ends.
  prestaged = Next::kStages && has_bulk_copy() && prestaged;
  if (prestaged) {
    if constexpr (Next::kStages) {
      DecAhead& ah = next.decode_ahead();
#pragma unroll
      for (int m = 0; m < kMaxUnitBlocks; ++m) mbar_wait(&ah.mbar[m], (ah.tiles - 1) & 1);
      if (threadIdx.x < kHeaderBytes)
        reinterpret_cast<uint8_t*>(&sh.header)[threadIdx.x] = reinterpret_cast<const uint8_t*>(&ah.header)[threadIdx.x];
      else if (threadIdx.x <= kHeaderBytes + MU)
        sh.entry[0][threadIdx.x - kHeaderBytes] = ah.entry[threadIdx.x - kHeaderBytes];
    }
  } else if (threadIdx.x < kHeaderBytes) {
    reinterpret_cast<uint8_t*>(&sh.header)[threadIdx.x] = header_byte(it, threadIdx.x);
  } else if (threadIdx.x < kHeaderBytes + 2 * (kMaxUnitBlocks + 1)) {
    const uint32_t j = threadIdx.x - kHeaderBytes, shape = j / (kMaxUnitBlocks + 1), m = j % (kMaxUnitBlocks + 1);
    const uint32_t M = shape == 0 ? MU : unit_blocks<Codec::FP32, MU>();
    const int64_t blk = int64_t(b) * M - 1 + m;
    BlockEntry e{};
    if (m <= M && blk >= 0 && kHeaderBytes + uint64_t(blk + 1) * kBlockEntryBytes <= it.bytes)
      e = load_entry(it.in + kHeaderBytes + uint64_t(blk) * kBlockEntryBytes);
    sh.entry[shape][m] = e;
  }
  __syncthreads();
  ZIPCCL_MARK(1);
  const Codec claimed = static_cast<Codec>(sh.header.codec);
  const uint32_t M = tile_blocks<MU>(claimed);
  if (checker) {
    if (threadIdx.x == 0) check(P, item, true, sh);
    __syncthreads();
    const Layout& L = sh.L;  // the tail bytes travel in the header
    if (static_cast<Status>(sh.status) == Status::kOk && L.codec != Codec::Raw && threadIdx.x < L.tail_bytes)
      it.out[L.n_elems * L.g.elem_bytes + threadIdx.x] = sh.header.tail[threadIdx.x];
  } else if (claimed != Codec::Raw && static_cast<uint8_t>(claimed) < kNumCodecs &&
             b * uint64_t(M) < sh.header.n_blocks) {
    switch (claimed) {
      case Codec::BF16:
        // Warp 1 stages the next tile, if any, while warp 0 checks this one (decode_unit()).
        // (has_bulk_copy() in the condition, a constant either way: under if constexpr, nvcc
        // warned NextTile::after_decode() unreferenced on sm_80.)
        if constexpr (Next::kStages)
          if (has_bulk_copy() && threadIdx.x / 32 == 1) {
            if (next.after_decode())
              next.stage_decode();
            else
              next.look_ahead();
          }
        decode_unit<Codec::BF16, MU>(P, item, it, b, sh, staged, prestaged);
        break;
      case Codec::FP16:
        decode_unit<Codec::FP16, MU>(P, item, it, b, sh, staged);
        break;
      default:
        decode_unit<Codec::FP32, MU>(P, item, it, b, sh, staged);
        break;
    }
  } else if (claimed == Codec::Raw) {  // a slice of the payload, once the header is checked
    if (threadIdx.x == 0) check(P, item, false, sh);
    __syncthreads();
    const Layout& L = sh.L;
    if (static_cast<Status>(sh.status) == Status::kOk) {
      const uint32_t data_tiles = it.tiles - 1;
      const uint64_t span = ((L.orig_bytes + data_tiles - 1) / data_tiles + 15) & ~uint64_t(15);
      const uint64_t lo = min(uint64_t(b) * span, L.orig_bytes);
      cta_copy(it.out + lo, it.in + kHeaderBytes + lo, min(span, L.orig_bytes - lo));
    }
  }
  ZIPCCL_MARK(6);  // (slot 7 is the encoder's)
  ZIPCCL_MARK(8);
  // Slot 9 follows slot 8 at once where a finish kernel publishes.
  bool last = false;
  if (FINISH) last = finish_tile(P, item, &sh.flag);
  ZIPCCL_MARK(9);
  if (last) finalize(P, item, sh);
}

}  // namespace
}  // namespace zipccl::gpu::detail
