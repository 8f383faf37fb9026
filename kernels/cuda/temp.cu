// Temporary-memory sizing shared by encode and decode.
#include "common.cuh"

namespace zipccl::gpu {

size_t temp_bytes(const size_t* sizes, int n) {
  // Batches are split into launches of kMaxBatch items; a launch needs the counters plus one
  // word per tile (at most one per 8 KiB, and the decoder's checker tile per item), and the
  // largest launch decides.
  size_t most = 0;
  for (int first = 0; first < n; first += kMaxBatch) {
    size_t tiles = 0;
    for (int i = first; i < n && i < first + kMaxBatch; ++i)
      tiles += detail::tiles_for(sizes[i], detail::tile_bytes<1>()) + 1;
    most = tiles > most ? tiles : most;
  }
  return detail::kTempHead + most * 8;
}

size_t temp_bytes_bound(size_t total_bytes, int n_items) {
  const size_t per_launch = n_items < kMaxBatch ? n_items : kMaxBatch;
  return detail::kTempHead + (total_bytes / detail::tile_bytes<1>() + 2 * per_launch) * 8;
}

cudaError_t init_temp(void* temp, size_t bytes, cudaStream_t stream) {
  return cudaMemsetAsync(temp, 0, bytes, stream);
}

}  // namespace zipccl::gpu
