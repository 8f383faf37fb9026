// Pinned host memory for device buffers' mirrors: copies from pageable memory would block the
// calling thread.
#include "codec_engine.h"
#include "cuda_scope.h"
#include "log.h"

namespace zipccl {

char* alloc_pinned(size_t bytes) {
  CudaScope scope(-1);
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    ZIP_WARN("cudaHostAlloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    return nullptr;
  }
  return static_cast<char*>(p);
}

void free_pinned(char* p) {
  CudaScope scope(-1);
  cudaFreeHost(p);
}

}  // namespace zipccl
