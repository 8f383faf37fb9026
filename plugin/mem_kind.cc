#include "mem_kind.h"

#include <initializer_list>
#include <dlfcn.h>

#include <mutex>

namespace zip {
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

MemKind memory_kind(const void* p) {
  static std::once_flag once;
  static GetAttributesFn fn = nullptr;
  std::call_once(once, [] { fn = lookup(); });
  if (!fn) return MemKind::kHost;
  PointerAttributes a{};
  if (fn(&a, p) != 0) return MemKind::kHost;
  return a.type == 2 ? MemKind::kDevice : MemKind::kHost;
}

}  // namespace zip
