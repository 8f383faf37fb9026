#include "device_mem.h"

#include <cstdio>
#include <cstdlib>

#ifdef ZIP_CLIENT_CUDA
#include <cuda_runtime_api.h>

#include "cuda_dmabuf.h"
#endif

namespace zipccl::client {

#ifdef ZIP_CLIENT_CUDA

namespace {
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  abort();
}

// Copies and fills run on a non-blocking stream of this process's own and wait for it alone: a
// device-wide synchronisation would also wait for the plugin's resident codec kernel, which stays
// while requests of this very thread hold it (under NCCL a proxy thread completes them; a driver
// that progresses its requests itself would deadlock).
cudaStream_t own_stream() {
  static cudaStream_t s = [] {
    cudaStream_t st = nullptr;
    check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return st;
  }();
  return s;
}
}  // namespace

bool have_cuda_device(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return true;
  *why = std::string("no CUDA device (") + (e != cudaSuccess ? cudaGetErrorString(e) : "none found") + ")";
  return false;
}

void* dev_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  return p;
}
void dev_free(void* p) { check(cudaFree(p), "cudaFree"); }
void* host_alloc_mapped(size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc");
  return p;
}
void host_free_mapped(void* p) { check(cudaFreeHost(p), "cudaFreeHost"); }
void to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, own_stream()), "cudaMemcpyAsync H2D");
  check(cudaStreamSynchronize(own_stream()), "cudaStreamSynchronize");
}
void from_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, own_stream()), "cudaMemcpyAsync D2H");
  check(cudaStreamSynchronize(own_stream()), "cudaStreamSynchronize");
}
void dev_fill(void* p, int byte, size_t bytes) {
  check(cudaMemsetAsync(p, byte, bytes, own_stream()), "cudaMemsetAsync");
  check(cudaStreamSynchronize(own_stream()), "cudaStreamSynchronize");
}

int dev_dmabuf_fd(void* p, size_t bytes, std::string* why) { return cuda_dmabuf_fd(p, bytes, why); }

#else

bool have_cuda_device(std::string* why) {
  *why = "built without CUDA (ZIPCCL_CUDA=OFF)";
  return false;
}
[[noreturn]] void no_cuda() {
  fprintf(stderr, "device memory requested in a build without CUDA\n");
  abort();
}
void* dev_alloc(size_t) { no_cuda(); }
void dev_free(void*) { no_cuda(); }
void* host_alloc_mapped(size_t) { no_cuda(); }
void host_free_mapped(void*) { no_cuda(); }
void to_device(void*, const void*, size_t) { no_cuda(); }
void from_device(void*, const void*, size_t) { no_cuda(); }
void dev_fill(void*, int, size_t) { no_cuda(); }
int dev_dmabuf_fd(void*, size_t, std::string*) { no_cuda(); }

#endif

}  // namespace zipccl::client
