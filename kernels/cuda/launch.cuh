// A launch of the encode or decode kernels: its parameters, its temp words, the tile -> item
// map, the follow-up launches of bulk batches, and the completion of an item.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "zipccl/format.h"
#include "zipccl/gpu_codec.h"
#include "zipccl/service_protocol.h"
#include "clock.cuh"
#include "ordering.cuh"
#include "tiling.cuh"

namespace zipccl::gpu::detail {

// Bulk encode tiles whose escape chunks total at most this many bytes (N(0,1) bf16: ~400 of a
// 32 KiB tile) leave them in temp and do not look back (encode_tile.cuh).
constexpr uint32_t kEscScratch = 1024;
// ... and add their escape bytes to their group's sum (per item, groups of kGroupTiles tiles),
// from which encode_fixup_kernel gets a tile's offset in one round of loads.
constexpr uint32_t kGroupTiles = 128;

// Launch parameters travel as kernel arguments (no host->device copy); kMaxBatch items fit
// in the 4 KiB parameter space.
struct LaunchItem {
  const uint8_t* in;
  uint8_t* out;
  uint64_t bytes;  // encode: input bytes; decode: message bytes available
  uint64_t cap;    // output capacity
  uint64_t limit;  // encode: largest coded message accepted (from max_ratio), as the CPU's
  uint32_t tile0;  // first tile (CTA) of this item in the grid
  uint32_t tiles;
  uint8_t codec;
  uint8_t auto_codec;
  uint8_t small_tiles;  // encode: 1 where the resident codec codes the item in kServiceSmallTile tiles
};

struct Launch {
  LaunchItem items[kMaxBatch];
  int n;
  uint8_t checksum;
  uint8_t raw_header_only;
  uint32_t* item_done;        // temp: tiles finished, per item
  uint32_t* item_err;         // temp: ~(order << 4 | status) of the first error, per item
  uint32_t* item_codec;       // temp: kCodecChosen | codec, once tile 0 has classified an auto item
  unsigned long long* state;  // temp: look-back state, per tile
  uint8_t* scratch;           // temp: bulk encode tiles' escape chunks, kEscScratch bytes per tile
  uint32_t* group_esc;        // temp, with scratch: escape bytes per group of kGroupTiles tiles
  Result* results;
  JobTimes* times;  // the resident kernel's job: where publish_result() notes the end (else null)
};
static_assert(sizeof(Launch) <= 4000, "kernel parameters must fit in 4 KiB");

// Temp layout: item_done[kMaxBatch], item_err[kMaxBatch], item_codec[kMaxBatch], then 8 bytes
// per tile, then (bulk encode launches) kEscScratch bytes per tile from a 16-byte boundary and
// the group sums.
constexpr size_t kTempHead = 3 * kMaxBatch * sizeof(uint32_t);
constexpr uint32_t kCodecChosen = 0x100;

// Where a launch of `tiles` tiles has its bulk scratch in temp: after the words, 16-byte aligned.
inline size_t scratch_at(size_t tiles) {
  return (kTempHead + tiles * 8 + 15) & ~size_t(15);
}
// Group sums of a launch of `tiles` tiles: item i's groups start at group_slot(tile0_i, i, 0),
// past the previous item's (ceil(t / G) <= floor(t / G) + 1).
inline size_t group_words(size_t tiles) {
  return tiles / kGroupTiles + kMaxBatch + 1;
}
__host__ __device__ __forceinline__ uint32_t group_slot(uint32_t tile0, int item, uint32_t u) {
  return tile0 / kGroupTiles + item + u / kGroupTiles;
}
// Groups of an item of `tiles` tiles.
__host__ __device__ __forceinline__ uint32_t item_groups(uint32_t tiles) {
  return (tiles + kGroupTiles - 1) / kGroupTiles;
}

__host__ __device__ inline uint32_t tiles_for(uint64_t bytes, uint32_t tile) {
  return bytes == 0 ? 1u : static_cast<uint32_t>((bytes + tile - 1) / tile);
}

// Completes a Launch whose items 0..m-1 are filled in except for their tiles: one tile per
// MU * 8 KiB of each item's tile_size member (encode: input bytes; decode: output capacity),
// which covers the units of every codec and Raw slices, plus `extra` tiles per item after
// those (the decoder's header checker); MU = bulk_mu for bulk batches, else 1. Points the
// launch at its temp words, bulk scratch (bulk_scratch bytes per tile, where temp has room) and
// results. Returns the grid size, or 0 when temp is too small for the words.
inline uint32_t finish_launch(Launch& P, int m, uint64_t LaunchItem::*tile_size, int bulk_mu, uint32_t extra,
                              uint32_t bulk_scratch, void* temp, size_t temp_size, Result* results, bool* bulk) {
  uint64_t total = 0;
  for (int i = 0; i < m; ++i) total += P.items[i].*tile_size;
  *bulk = total >= kBulkBytes;
  const uint32_t tile = *bulk ? bulk_mu * tile_bytes<1>() : tile_bytes<1>();
  uint32_t tiles = 0;
  for (int i = 0; i < m; ++i) {
    P.items[i].tile0 = tiles;
    P.items[i].tiles = tiles_for(P.items[i].*tile_size, tile) + extra;
    tiles += P.items[i].tiles;
  }
  if (temp_size < kTempHead + size_t(tiles) * 8) return 0;
  // The scratch speeds bulk encodes up; without room for it they run without (every tile looks back).
  const size_t at = scratch_at(tiles);
  const size_t scratch = *bulk && temp_size >= at + size_t(tiles) * bulk_scratch + group_words(tiles) * sizeof(uint32_t)
                             ? size_t(tiles) * bulk_scratch
                             : 0;
  P.n = m;
  P.item_done = static_cast<uint32_t*>(temp);
  P.item_err = P.item_done + kMaxBatch;
  P.item_codec = P.item_err + kMaxBatch;
  P.state = reinterpret_cast<unsigned long long*>(static_cast<uint8_t*>(temp) + kTempHead);
  P.scratch = scratch ? static_cast<uint8_t*>(temp) + at : nullptr;
  P.group_esc = scratch ? reinterpret_cast<uint32_t*>(P.scratch + scratch) : nullptr;
  P.results = results;
  return tiles;
}

// The item that tile `tile` (by default this CTA's) belongs to.
__device__ __forceinline__ int find_item(const Launch& P, uint32_t tile) {
  int lo = 0, hi = P.n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (P.items[mid].tile0 <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}
__device__ __forceinline__ int find_item(const Launch& P) {
  return find_item(P, blockIdx.x);
}

// Programmatic dependent launch (sm_90): a bulk launch's follow-up kernels (the finish kernels,
// and the encoder's fixup) are launched by launch_after() to start while the kernel before them
// drains; each waits in grid_dependency_wait() until that kernel has completed and
// its writes are visible, and lets its own successor launch with allow_dependents(). Elsewhere
// these are no-ops and the launch is an ordinary stream-ordered one.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// A batch call that fails after a kernel of it is queued (a follow-up that did not launch, a
// later launch's temp too small) returns err and zeroes temp behind that kernel, which may
// have left flags and counters in it; the batch's results are then never published.
inline cudaError_t launch_error(cudaError_t err, bool queued, void* temp, size_t temp_size, cudaStream_t stream) {
  if (queued) init_temp(temp, temp_size, stream);
  return err;
}

template <typename... Args>
cudaError_t launch_after(void (*kernel)(Args...), uint32_t grid, uint32_t block, cudaStream_t stream, Args... args) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev))
    major = 0;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  // Only kernels compiled from sm_90 PTX wait in grid_dependency_wait(): a build without sm_90
  // code runs JIT-compiled older PTX on an H100, whose follow-ups must launch stream-ordered.
  cudaFuncAttributes fa{};
  cfg.numAttrs = major >= 9 && cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.ptxVersion >= 90 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// Count this tile as finished; true in every thread of the CTA that finishes the item last,
// which then sees all other tiles' writes. The add releases the CTA's writes (the barrier
// orders them before it) and acquires those of the tiles counted before; the barrier after it
// passes that on to the other threads. (Sequentially consistent fences around a relaxed add,
// in every thread of the last CTA, made small launches 0.2-0.4 us slower.)
__device__ __forceinline__ bool finish_tile(const Launch& P, int item, int* sh_flag) {
  __syncthreads();
  if (threadIdx.x == 0) {
    *sh_flag = count_acq_rel(&P.item_done[item]) == P.items[item].tiles - 1;
  }
  __syncthreads();
  return *sh_flag;
}

// Publish the item's result, system-wide visible: the done flag last, by a release store at
// system scope (it orders the fields, and every write the caller's barrier ordered before it).
__device__ __forceinline__ void publish_result(const Launch& P, int item, uint64_t bytes, Status s, Codec c,
                                               bool raw_from_input) {
  Result* r = &P.results[item];
  r->bytes = s == Status::kOk ? bytes : 0;
  r->status = static_cast<int32_t>(s);
  r->codec = static_cast<uint8_t>(c);
  r->raw_from_input = raw_from_input;
  r->small_tiles = P.items[item].small_tiles;
  if (P.times) P.times->end = globaltimer_ns();
  set_flag_release_sys(&r->done);
}

}  // namespace zipccl::gpu::detail
