#include "mem_kind.h"

#include <dlfcn.h>

#include <initializer_list>
#include <mutex>

#include "engine_params.h"

#ifdef ZIP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zipccl {
namespace {

// cudaPointerAttributes (CUDA >= 11); the tail padded generously.
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

MemInfo memory_info(const void* p) {
  static std::once_flag once;
  static GetAttributesFn fn = nullptr;
  std::call_once(once, [] { fn = lookup(); });
  MemInfo m;
  PointerAttributes a{};
  const bool asked = fn && fn(&a, p) == 0;
  if (asked) m.cuda_type = a.type;
  if (asked && a.type == 2) {
    m.kind = MemKind::kDevice;
    m.device = a.device;
    return m;
  }
  m.gpu_mapped = gpu_emulate() || (asked && a.type == 1 && a.device_pointer == p);
  return m;
}

}  // namespace zipccl
