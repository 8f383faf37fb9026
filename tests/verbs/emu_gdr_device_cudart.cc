// emu_gdr_device.h on the CUDA runtime: cudaMalloc'd buffers on a real GPU.
#include <cuda_runtime.h>

#include "emu_gdr_device.h"

namespace zipccl::verbs::emu_test::gdr {

std::string unavailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) != cudaSuccess || n == 0 ? "no CUDA device" : "";
}

void* alloc(size_t n) {
  void* p = nullptr;
  return cudaSetDevice(0) == cudaSuccess && cudaMalloc(&p, n) == cudaSuccess ? p : nullptr;
}

void release(void* p) { cudaFree(p); }

bool upload(void* device_dst, const void* host_src, size_t n) {
  return cudaMemcpy(device_dst, host_src, n, cudaMemcpyHostToDevice) == cudaSuccess;
}

bool download(void* host_dst, const void* device_src, size_t n) {
  return cudaMemcpy(host_dst, device_src, n, cudaMemcpyDeviceToHost) == cudaSuccess;
}

}  // namespace zipccl::verbs::emu_test::gdr
