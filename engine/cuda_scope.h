// Every CUDA call of ours runs inside a CudaScope.
#pragma once

#include <cuda_runtime_api.h>

namespace zipccl {

// For one call of ours: `device` current and stream capture relaxed (a thread capturing a graph
// in global mode would otherwise fail our calls), both restored afterwards. On NCCL's threads
// both already hold and this costs three cheap calls.
class CudaScope {
 public:
  explicit CudaScope(int device) {
    cudaThreadExchangeStreamCaptureMode(&mode_);
    if (device >= 0 && cudaGetDevice(&prev_) == cudaSuccess && prev_ != device)
      restore_ = cudaSetDevice(device) == cudaSuccess;
  }
  ~CudaScope() {
    if (restore_) cudaSetDevice(prev_);
    cudaThreadExchangeStreamCaptureMode(&mode_);
  }

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  int prev_ = -1;
  bool restore_ = false;
};

}  // namespace zipccl
