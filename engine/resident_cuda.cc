// The resident codec's device side on CUDA: its mapped ServiceHost, device state and stream (on
// an SM partition where CTAs share SMs), made and the kernel launched once by
// make_cuda_service_device() (where the caller may block, before any kernel of ours runs);
// launches and reaps on the launcher thread.
#include <cuda.h>

#include <algorithm>
#include <cstring>

#include "cuda_dmabuf.h"
#include "cuda_scope.h"
#include "engine_params.h"
#include "resident_codec.h"
#include "resident_gpus.h"
#include "sm_partition.h"
#include "zipccl/gpu_service.h"

namespace zipccl {
namespace {

std::string cuda_error(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

class CudaServiceDevice final : public ServiceDevice {
 public:
  CudaServiceDevice(int device, int ctas) : device_(device), ctas_(ctas) {}
  // Frees after the kernel has exited (ResidentCodec never destroys it otherwise): cudaFree
  // would wait for a running kernel.
  ~CudaServiceDevice() override {
    CudaScope scope(device_);
    partition_.reset();  // its stream with it
    if (own_stream_) cudaStreamDestroy(own_stream_);
    if (state_) cudaFree(state_);
    if (host_) cudaFreeHost(host_);
  }

  bool init(std::string* err) {
    CudaScope scope(device_);
    cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(gpu::ServiceHost), cudaHostAllocMapped);
    if (e != cudaSuccess) return *err = cuda_error("cudaHostAlloc", e), false;
    std::memset(static_cast<void*>(host_), 0, sizeof(gpu::ServiceHost));
    if ((e = cudaHostGetDevicePointer(reinterpret_cast<void**>(&dhost_), host_, 0)) != cudaSuccess)
      return *err = cuda_error("cudaHostGetDevicePointer", e), false;
    if ((e = cudaMalloc(&state_, gpu::service_device_bytes())) != cudaSuccess)
      return *err = cuda_error("cudaMalloc", e), false;
    // Loaded now, and launched once in its stream's context below: a lazy load at the first
    // launch would wait for any running kernel.
    if ((e = gpu::service_load(&staging_)) != cudaSuccess) return *err = cuda_error("loading the kernel", e), false;
    int lo = 0, hi = 0;  // highest priority: not queued behind the training step's kernels
    cudaDeviceGetStreamPriorityRange(&lo, &hi);
    std::string why = "NCCL_ZIP_GPU_CTAS_PER_SM=1";
    if (gpu_ctas_per_sm() > 1) {
      // Under MPS a partition's launch waits behind the other contexts' running kernels (NCCL's
      // among them) for milliseconds: measured 35 ms at p90 where the primary context starts in
      // 0.1-0.3 ms.
      int mps = 0;
      if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, device_) == cudaSuccess && mps)
        why = "MPS shares this GPU";
      else
        partition_ = SmPartition::create(device_, partition_sms(ctas_, int(gpu_ctas_per_sm())), hi, &why);
    }
    if (partition_ && !trial(partition_->stream(), launch_ctas(ctas_), err)) {  // spread rather than no GPU codec
      why = "a launch there failed (" + *err + ")";
      partition_.reset();
    }
    if (!partition_) {
      cudaStream_t s = nullptr;
      if ((e = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi)) != cudaSuccess)
        return *err = cuda_error("cudaStreamCreateWithPriority", e), false;
      own_stream_ = s;
      if (!trial(s, ctas_, err)) return false;
    }
    const int sms = gpu::service_sms(host_, launch_ctas(ctas_));
    placement_ = "on " + std::to_string(sms) + " SMs" +
                 (partition_ ? " (an SM partition of " + std::to_string(partition_->sms()) + ")"
                             : " (no SM partition: " + why + ")") +
                 (staging_ ? "" : ", one tile buffer a CTA (two CTAs with two do not fit on an SM)");
    return true;
  }

  gpu::ServiceHost* host() override { return host_; }
  std::string placement() const override { return placement_; }
  int launch_ctas(int asked) const override {
    return partition_ ? std::clamp(partition_->sms() * int(gpu_ctas_per_sm()), asked, gpu::kServiceMaxCtas) : asked;
  }

  bool launch(uint32_t generation, int ctas, std::string* err) override {
    CudaScope scope(device_);
    const cudaError_t e = gpu::service_launch(dhost_, state_, ctas, generation, staging_, stream_);
    if (e != cudaSuccess) *err = cuda_error("launch", e);
    return e == cudaSuccess;
  }

  bool reap(std::string* err) override {
    CudaScope scope(device_);
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) *err = cuda_error("cudaStreamSynchronize", e);
    return e == cudaSuccess;
  }

 private:
  // Zeroes the device state on `s` and launches the kernel there once with `ctas` CTAs, asked to
  // stop before it starts (its CTAs store where they ran); `s` becomes the kernel's stream.
  bool trial(cudaStream_t s, int ctas, std::string* err) {
    cudaError_t e;
    if ((e = gpu::service_init(state_, s)) != cudaSuccess || (e = cudaStreamSynchronize(s)) != cudaSuccess)
      return *err = cuda_error("zeroing the device state", e), false;
    __atomic_store_n(&host_->stop, gpu::kServiceStop, __ATOMIC_RELEASE);
    if ((e = gpu::service_launch(dhost_, state_, ctas, kTrialGeneration, staging_, s)) != cudaSuccess ||
        (e = cudaStreamSynchronize(s)) != cudaSuccess)
      return *err = cuda_error("a trial launch of the kernel", e), false;
    if (!gpu::service_exited(host_, kTrialGeneration)) return *err = "a trial launch of the kernel did not run", false;
    __atomic_store_n(&host_->stop, uint64_t(0), __ATOMIC_RELEASE);
    host_->started = host_->exited = 0;  // no kernel runs: ResidentCodec's generations count from 1
    stream_ = s;
    return true;
  }

  static constexpr uint32_t kTrialGeneration = ~0u;  // ResidentCodec's count up from 1
  const int device_, ctas_;  // CTAs asked for
  std::unique_ptr<SmPartition> partition_;
  std::string placement_;
  bool staging_ = false;  // a CTA stages its next encode tile (gpu::service_load())
  gpu::ServiceHost* host_ = nullptr;
  gpu::ServiceHost* dhost_ = nullptr;
  void* state_ = nullptr;
  cudaStream_t stream_ = nullptr;      // the kernel's: the partition's or own_stream_
  cudaStream_t own_stream_ = nullptr;  // made here when there is no partition
};

}  // namespace

bool cuda_device_present(std::string* why) {
  CudaScope scope(-1);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return true;
  *why = std::string("no usable CUDA device: cudaGetDeviceCount says ") +
         (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  return false;
}

int current_cuda_device() {
  int d = -1;
  return cudaGetDevice(&d) == cudaSuccess ? d : -1;
}

char* alloc_mapped(size_t bytes, std::string* err) {
  CudaScope scope(-1);
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (e != cudaSuccess) {
    *err = cuda_error("cudaHostAlloc of the staging arena", e);
    return nullptr;
  }
  return static_cast<char*>(p);
}

void free_mapped(char* p) {
  CudaScope scope(-1);
  cudaFreeHost(p);
}

char* alloc_device(int device, size_t bytes, std::string* err) {
  CudaScope scope(device);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    *err = cuda_error("cudaMalloc of the device staging arena", e);
    return nullptr;
  }
  return static_cast<char*>(p);
}

void free_device(int device, char* p) {
  CudaScope scope(device);
  cudaFree(p);
}

int export_dmabuf(int device, char* p, size_t bytes, std::string* err) {
  CudaScope scope(device);
  return cuda_dmabuf_fd(p, bytes, err);
}

std::unique_ptr<ServiceDevice> make_cuda_service_device(int device, int ctas, std::string* err) {
  auto d = std::make_unique<CudaServiceDevice>(device, ctas);
  if (!d->init(err)) return nullptr;
  return d;
}

}  // namespace zipccl
