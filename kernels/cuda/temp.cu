// Temporary-memory sizing shared by encode and decode.
#include "launch.cuh"
#include "tiling.cuh"

namespace zipccl::gpu {

using detail::kEscScratch;
using detail::kEncodeBulkMU;

size_t temp_bytes(const size_t* sizes, int n) {
  // Batches are split into launches of kMaxBatch items; a launch needs the counters plus one
  // word per tile (at most one per 8 KiB, and the decoder's checker tile per item), bulk
  // launches kEscScratch bytes per encode tile and the group sums too, and the largest launch
  // decides.
  size_t most = 0;
  for (int first = 0; first < n; first += kMaxBatch) {
    size_t tiles = 0, bulk_tiles = 0, total = 0;
    for (int i = first; i < n && i < first + kMaxBatch; ++i) {
      tiles += detail::tiles_for(sizes[i], detail::tile_bytes<1>()) + 1;
      bulk_tiles += detail::tiles_for(sizes[i], detail::tile_bytes<kEncodeBulkMU>());
      total += sizes[i];
    }
    const size_t need = total >= detail::kBulkBytes ? detail::scratch_at(tiles) + bulk_tiles * kEscScratch +
                                                          detail::group_words(bulk_tiles) * sizeof(uint32_t)
                                                    : detail::kTempHead + tiles * 8;
    most = need > most ? need : most;
  }
  return most;
}

size_t temp_bytes_bound(size_t total_bytes, int n_items) {
  const size_t per_launch = n_items < kMaxBatch ? n_items : kMaxBatch;
  return detail::kTempHead + (total_bytes / detail::tile_bytes<1>() + 2 * per_launch) * 8 + 16 +
         (total_bytes / detail::tile_bytes<kEncodeBulkMU>() + per_launch) * kEscScratch +
         (total_bytes / (detail::tile_bytes<kEncodeBulkMU>() * detail::kGroupTiles) + kMaxBatch + 2) * sizeof(uint32_t);
}

cudaError_t init_temp(void* temp, size_t bytes, cudaStream_t stream) {
  return cudaMemsetAsync(temp, 0, bytes, stream);
}

}  // namespace zipccl::gpu
