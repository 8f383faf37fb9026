#include "host_store_load.h"

namespace zipccl::bench {
namespace {

__global__ void host_store_kernel(const uint4* src, uint4* dst, size_t n16, const volatile uint32_t* stop,
                                  unsigned long long* copied) {
  const size_t share = n16 / gridDim.x, first = share * blockIdx.x;
  unsigned long long rounds = 0;
  __shared__ uint32_t done;
  do {
    for (size_t i = first + threadIdx.x; i < first + share; i += blockDim.x) dst[i] = src[i];
    ++rounds;
    __syncthreads();
    if (threadIdx.x == 0) done = *stop;
    __syncthreads();
  } while (!done);
  if (threadIdx.x == 0) copied[blockIdx.x] = rounds * share * 16;
}

}  // namespace

cudaError_t load_host_store_kernel() {
  cudaFuncAttributes a;
  return cudaFuncGetAttributes(&a, host_store_kernel);
}

cudaError_t launch_host_store_load(const void* src, void* host_dst, size_t bytes, int ctas, const uint32_t* stop,
                                   unsigned long long* copied, cudaStream_t stream) {
  if (ctas < 1 || bytes % (16 * size_t(ctas))) return cudaErrorInvalidValue;
  host_store_kernel<<<ctas, 512, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(host_dst), bytes / 16,
                                              stop, copied);
  return cudaGetLastError();
}

}  // namespace zipccl::bench
