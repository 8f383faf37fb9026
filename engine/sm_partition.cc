#include "sm_partition.h"

#include <cuda.h>

#include <cstdio>

namespace zipccl {

// The driver's green-context calls, found through the runtime (the plugin links no libcuda).
struct SmPartition::Driver {
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetDevResource) get_resource = nullptr;
  decltype(&cuDevSmResourceSplitByCount) split = nullptr;
  decltype(&cuDevResourceGenerateDesc) describe = nullptr;
  decltype(&cuGreenCtxCreate) create = nullptr;
  decltype(&cuGreenCtxStreamCreate) stream_create = nullptr;
  decltype(&cuGreenCtxDestroy) destroy = nullptr;
  std::string missing;  // the first call not found

  Driver() {
    find("cuDeviceGet", &device_get);
    find("cuDeviceGetDevResource", &get_resource);
    find("cuDevSmResourceSplitByCount", &split);
    find("cuDevResourceGenerateDesc", &describe);
    find("cuGreenCtxCreate", &create);
    find("cuGreenCtxStreamCreate", &stream_create);
    find("cuGreenCtxDestroy", &destroy);
  }
  template <class F>
  void find(const char* name, F* f) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(name, &p, CUDA_VERSION, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess && p)
      *f = reinterpret_cast<F>(p);
    else if (missing.empty())
      missing = name;
  }
};

namespace {

std::string driver_error(const char* what, CUresult r) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s: CUDA driver error %d", what, int(r));
  return buf;
}

}  // namespace

std::unique_ptr<SmPartition> SmPartition::create(int device, int sms, int priority, std::string* why) {
  static const Driver driver;
  if (!driver.missing.empty()) {
    *why = "the driver has no " + driver.missing;
    return nullptr;
  }
  CUdevice dev = 0;
  CUdevResource all{}, part{};
  CUdevResourceDesc desc = nullptr;
  CUgreenCtx ctx = nullptr;
  CUstream stream = nullptr;
  unsigned groups = 1;
  CUresult r;
  if ((r = driver.device_get(&dev, device)) != CUDA_SUCCESS) return *why = driver_error("cuDeviceGet", r), nullptr;
  if ((r = driver.get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM)) != CUDA_SUCCESS)
    return *why = driver_error("cuDeviceGetDevResource", r), nullptr;
  if (sms >= int(all.sm.smCount)) {
    *why = "it would hold every SM";
    return nullptr;
  }
  // Our kernel uses no clusters: SMs taken one by one, not by whole processing clusters.
  if ((r = driver.split(&part, &groups, &all, nullptr, CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING,
                        unsigned(sms))) != CUDA_SUCCESS || groups < 1)
    return *why = driver_error("cuDevSmResourceSplitByCount", r), nullptr;
  if ((r = driver.describe(&desc, &part, 1)) != CUDA_SUCCESS)
    return *why = driver_error("cuDevResourceGenerateDesc", r), nullptr;
  if ((r = driver.create(&ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS)
    return *why = driver_error("cuGreenCtxCreate", r), nullptr;
  if ((r = driver.stream_create(&stream, ctx, CU_STREAM_NON_BLOCKING, priority)) != CUDA_SUCCESS) {
    driver.destroy(ctx);
    return *why = driver_error("cuGreenCtxStreamCreate", r), nullptr;
  }
  std::unique_ptr<SmPartition> p(new SmPartition);
  p->driver_ = &driver;
  p->ctx_ = ctx;
  p->stream_ = reinterpret_cast<cudaStream_t>(stream);
  p->sms_ = int(part.sm.smCount);
  return p;
}

SmPartition::~SmPartition() {
  if (stream_) cudaStreamDestroy(stream_);
  if (ctx_) driver_->destroy(static_cast<CUgreenCtx>(ctx_));
}

}  // namespace zipccl
