#include "cuda.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <vector>

namespace zipccl::verbs::emu {
namespace {

// The few cuda.h definitions used, by value: CUDA headers may be absent where this builds.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = uintptr_t;
using CUcontext = void*;
using CUstream = void*;
constexpr CUresult kSuccess = 0;
constexpr int kAttrMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttrDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE
constexpr unsigned kStreamNonBlocking = 1;  // CU_STREAM_NON_BLOCKING

struct Driver {
  CUresult (*pointer_get_attribute)(void*, int, CUdeviceptr);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*ctx_push)(CUcontext);
  CUresult (*ctx_pop)(CUcontext*);
  CUresult (*stream_create)(CUstream*, unsigned);
  CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*stream_synchronize)(CUstream);
};

template <typename F>
bool load(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

// Null without libcuda. Never unloaded: CUDA does not survive being unmapped. No cuInit here:
// only a process that initialized CUDA itself can have device memory (before that every query
// fails, so every address is host memory), and initializing CUDA for the others would cost
// them time and break their forked children.
const Driver* driver() {
  static const Driver* d = [] () -> const Driver* {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib) return nullptr;
    static Driver fn;
    // The _v2 names are what cuda.h maps these calls to.
    bool ok = load(lib, "cuPointerGetAttribute", &fn.pointer_get_attribute) &&
              load(lib, "cuDeviceGet", &fn.device_get) &&
              load(lib, "cuDevicePrimaryCtxRetain", &fn.primary_ctx_retain) &&
              load(lib, "cuCtxPushCurrent_v2", &fn.ctx_push) &&
              load(lib, "cuCtxPopCurrent_v2", &fn.ctx_pop) &&
              load(lib, "cuStreamCreate", &fn.stream_create) &&
              load(lib, "cuMemcpyAsync", &fn.memcpy_async) &&
              load(lib, "cuStreamSynchronize", &fn.stream_synchronize);
    return ok ? &fn : nullptr;
  }();
  return d;
}

// Per device: its primary context, retained for the life of the process (the application's
// own reference may go first), and the copy stream made in it.
struct DeviceCopier {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
};

int device_at(const Driver* d, const void* p) {
  unsigned type = 0;
  int ordinal = -1;
  CUdeviceptr at = reinterpret_cast<CUdeviceptr>(p);
  if (d->pointer_get_attribute(&type, kAttrMemoryType, at) != kSuccess ||
      type != kMemoryTypeDevice ||
      d->pointer_get_attribute(&ordinal, kAttrDeviceOrdinal, at) != kSuccess) {
    return -1;
  }
  return ordinal;
}

void report(const char* what, CUresult rc, int device) {
  std::fprintf(stderr, "zipccl-verbs-emu: %s failed with CUDA error %d on device %d\n", what, rc,
               device);
}

}  // namespace

int cuda_device_of(const void* p, size_t len) {
  const Driver* d = driver();
  if (!d) return -1;
  int first = device_at(d, p);
  if (first < 0) return -1;
  // The last byte too: a range running past the allocation is not device memory as a whole.
  int last = device_at(d, static_cast<const char*>(p) + len - 1);
  return last == first ? first : -1;
}

bool cuda_copy(int device, void* dst, const void* src, size_t n) {
  static std::mutex mu;
  static std::vector<DeviceCopier> copiers;
  const Driver* d = driver();
  std::lock_guard<std::mutex> lock(mu);
  if (copiers.size() <= static_cast<size_t>(device)) copiers.resize(device + 1);
  DeviceCopier& c = copiers[device];
  CUresult rc;
  if (!c.ctx) {
    CUdevice dev;
    if ((rc = d->device_get(&dev, device)) != kSuccess ||
        (rc = d->primary_ctx_retain(&c.ctx, dev)) != kSuccess) {
      c.ctx = nullptr;
      report("cuDevicePrimaryCtxRetain", rc, device);
      return false;
    }
  }
  if ((rc = d->ctx_push(c.ctx)) != kSuccess) {
    report("cuCtxPushCurrent", rc, device);
    return false;
  }
  const char* what = "cuStreamCreate";
  CUstream stream = c.stream;
  if (stream || (rc = d->stream_create(&stream, kStreamNonBlocking)) == kSuccess) {
    c.stream = stream;
    what = "cuMemcpyAsync";
    rc = d->memcpy_async(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
                         n, c.stream);
    if (rc == kSuccess) {
      what = "cuStreamSynchronize";
      rc = d->stream_synchronize(c.stream);
    }
  }
  CUcontext popped;
  d->ctx_pop(&popped);
  if (rc != kSuccess) report(what, rc, device);
  return rc == kSuccess;
}

}  // namespace zipccl::verbs::emu
