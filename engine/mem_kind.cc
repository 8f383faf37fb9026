#include "mem_kind.h"

#include <dlfcn.h>

#include <initializer_list>
#include <mutex>

#ifdef ZIP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zipccl {
namespace {

// cudaPointerAttributes (CUDA >= 11): type first; the rest is padded generously since we only
// read the type.
struct PointerAttributes {
  int type;  // 0 unregistered, 1 host, 2 device, 3 managed
  int device;
  void* device_pointer;
  void* host_pointer;
  char reserved[64];
};
using GetAttributesFn = int (*)(PointerAttributes*, const void*);

GetAttributesFn lookup() {
#ifdef ZIP_WITH_CUDA
  return reinterpret_cast<GetAttributesFn>(&cudaPointerGetAttributes);  // the layout above is CUDA's
#endif
  // RTLD_NOLOAD: never pull CUDA into a process that does not use it already.
  for (const char* lib : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}) {
    if (void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD)) {
      auto fn = reinterpret_cast<GetAttributesFn>(dlsym(h, "cudaPointerGetAttributes"));
      dlclose(h);  // drops only our reference; the runtime stays loaded by its owner
      if (fn) return fn;
    }
  }
  return nullptr;
}

}  // namespace

MemKind memory_kind(const void* p, int* device) {
  static std::once_flag once;
  static GetAttributesFn fn = nullptr;
  std::call_once(once, [] { fn = lookup(); });
  *device = -1;
  PointerAttributes a{};
  if (!fn || fn(&a, p) != 0 || a.type != 2) return MemKind::kHost;
  *device = a.device;
  return MemKind::kDevice;
}

}  // namespace zipccl
