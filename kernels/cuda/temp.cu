// Temporary-memory sizing shared by encode and decode.
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "common.cuh"

namespace zipccl::gpu {

size_t temp_bytes(const size_t* sizes, int n) {
  // Batches are split into launches of kMaxBatch items; a launch needs the counters plus one
  // look-back word per tile (at most one per 8 KiB), and the largest launch decides.
  size_t most = 0;
  for (int first = 0; first < n; first += kMaxBatch) {
    size_t tiles = 0;
    for (int i = first; i < n && i < first + kMaxBatch; ++i)
      tiles += detail::tiles_for(sizes[i], detail::tile_bytes<1>());
    most = tiles > most ? tiles : most;
  }
  return detail::kTempHead + most * 8;
}

size_t temp_bytes_bound(size_t total_bytes, int n_items) {
  const size_t per_launch = n_items < kMaxBatch ? n_items : kMaxBatch;
  return detail::kTempHead + (total_bytes / detail::tile_bytes<1>() + per_launch) * 8;
}

namespace detail {
uint32_t persistent_grid(const void* kernel, int threads, size_t dyn_smem, uint32_t tiles) {
  // Per device and kernel, computed once (a few kernels, a few devices).
  struct Entry {
    const void* kernel;
    int device;
    uint32_t ctas;
  };
  static Entry cache[64];
  static std::atomic<int> used{0};
  int dev = 0;
  cudaGetDevice(&dev);
  const int n = used.load(std::memory_order_acquire);
  uint32_t ctas = 0;
  for (int i = 0; i < n && i < 64; ++i)
    if (cache[i].kernel == kernel && cache[i].device == dev) ctas = cache[i].ctas;
  if (ctas == 0) {
    int sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    // All of the unified L1/shared memory as shared, so that the CTAs the occupancy counts
    // fit (6 x (32 KiB double buffer + static) is over the default split's share).
    if (!std::getenv("ZIPCCL_GPU_EXP_DEFAULT_CARVEOUT"))
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dyn_smem);
    ctas = uint32_t(sms > 0 ? sms : 1) * uint32_t(per_sm > 0 ? per_sm : 1);
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    const int k = used.load(std::memory_order_relaxed);
    if (k < 64) {
      cache[k] = {kernel, dev, ctas};
      used.store(k + 1, std::memory_order_release);
    }
  }
  static const bool full = std::getenv("ZIPCCL_GPU_EXP_FULL_GRID") != nullptr;  // experiment: one CTA per tile
  if (full) return tiles;
  return tiles < ctas ? tiles : ctas;
}

int bulk_ctas_per_sm() {
  static const int v = [] {
    const char* e = std::getenv("ZIPCCL_GPU_BULK_CTAS_PER_SM");
    return e && std::atoi(e) == 4 ? 4 : 6;
  }();
  return v;
}
}  // namespace detail

cudaError_t init_temp(void* temp, size_t bytes, cudaStream_t stream) {
  return cudaMemsetAsync(temp, 0, bytes, stream);
}

}  // namespace zipccl::gpu
