// A stream whose kernels run on a few SMs only: a green context holding `sms` of the device's
// SMs. The resident kernel launched there packs two CTAs on each SM, which overlaps two tiles'
// chains of round trips to L2 on one SM where a CTA alone leaves it waiting: the same CTAs code
// about as fast on half the SMs (docs/gpu-codec.md). The partition only confines our kernel;
// other work still runs on those SMs beside it.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

namespace zipccl {

class SmPartition {
 public:
  // On CUDA device `device`, current, where blocking is allowed; null with *why where the
  // driver makes none (before CUDA 12.4, a device or service that has no green contexts).
  static std::unique_ptr<SmPartition> create(int device, int sms, int priority, std::string* why);
  ~SmPartition();
  SmPartition(const SmPartition&) = delete;
  SmPartition& operator=(const SmPartition&) = delete;

  cudaStream_t stream() const { return stream_; }
  int sms() const { return sms_; }  // may exceed the count asked for (the split's granularity)

 private:
  SmPartition() = default;
  struct Driver;
  const Driver* driver_ = nullptr;
  void* ctx_ = nullptr;  // CUgreenCtx
  cudaStream_t stream_ = nullptr;
  int sms_ = 0;
};

// SMs for `ctas` CTAs packed `per_sm` to one.
inline int partition_sms(int ctas, int per_sm) { return (ctas + per_sm - 1) / per_sm; }

}  // namespace zipccl
