#include "device_mem.h"

#include <cstdio>
#include <cstdlib>

#ifdef ZIP_CLIENT_CUDA
#include <cuda.h>  // types only: the driver entry point comes through the runtime
#include <cuda_runtime_api.h>
#include <unistd.h>
#endif

namespace zipccl::client {

#ifdef ZIP_CLIENT_CUDA

namespace {
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  abort();
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
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  // From pageable memory cudaMemcpy may return before the DMA has landed, and the plugin reads
  // the buffer from its own non-blocking stream, which does not wait for the legacy stream.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}
void from_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}
void dev_fill(void* p, int byte, size_t bytes) {
  check(cudaMemset(p, byte, bytes), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // cudaMemset is asynchronous
}

int dev_dmabuf_fd(void* p, size_t bytes, std::string* why) {
  using GetHandle = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070, cudaEnableDefault, &q) !=
          cudaSuccess || !fn) {
    *why = "cuMemGetHandleForAddressRange not available";
    return -1;
  }
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  int fd = -1;
  const CUresult r = reinterpret_cast<GetHandle>(fn)(&fd, reinterpret_cast<CUdeviceptr>(p),
                                                      (bytes + page - 1) / page * page,
                                                      CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS) {
    *why = "cuMemGetHandleForAddressRange failed (" + std::to_string(int(r)) + ")";
    return -1;
  }
  return fd;
}

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
