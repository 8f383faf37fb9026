// A DMA-BUF of device memory, for an HCA to register it where nvidia-peermem is absent. Header
// only, for CUDA builds: the engine (the plugin's static runtime) and the test drivers (the shared
// one, as PyTorch) each compile it against their own runtime. The driver function comes through
// the runtime's entry point, so nothing links libcuda.
#pragma once

#include <cuda.h>  // types only
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <string>

namespace zipccl {

// An fd of [p, p + bytes rounded up to whole pages) on the current device, which the caller
// closes; -1 with *err where the driver cannot export it.
inline int cuda_dmabuf_fd(void* p, size_t bytes, std::string* err) {
  using GetHandle = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !fn) {
    *err = "the driver has no cuMemGetHandleForAddressRange";
    return -1;
  }
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  int fd = -1;
  const CUresult r = reinterpret_cast<GetHandle>(fn)(&fd, reinterpret_cast<CUdeviceptr>(p),
                                                      (bytes + page - 1) / page * page,
                                                      CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS) {
    *err = "cuMemGetHandleForAddressRange (DMA-BUF) failed with CUresult " + std::to_string(int(r));
    return -1;
  }
  return fd;
}

}  // namespace zipccl
