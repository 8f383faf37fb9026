// emu_gdr_device.h on the fake libcuda (fake_libcuda.cc): loaded here by path before the
// emulation looks for libcuda.so.1, which then finds it by its soname.
#include <dlfcn.h>

#include "emu_gdr_device.h"

namespace zipccl::verbs::emu_test::gdr {
namespace {

struct Fake {
  void* (*alloc)(size_t, int);
  void (*release)(void*);
  void (*copy)(void*, const void*, size_t);
};

const Fake* fake() {
  static const Fake* f = []() -> const Fake* {
    void* lib = dlopen(ZIP_FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    if (!lib || dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != lib) return nullptr;
    static Fake fn;
    fn.alloc = reinterpret_cast<void* (*)(size_t, int)>(dlsym(lib, "zip_fake_cuda_alloc"));
    fn.release = reinterpret_cast<void (*)(void*)>(dlsym(lib, "zip_fake_cuda_free"));
    fn.copy = reinterpret_cast<void (*)(void*, const void*, size_t)>(dlsym(lib, "zip_fake_cuda_copy"));
    return fn.alloc && fn.release && fn.copy ? &fn : nullptr;
  }();
  return f;
}

}  // namespace

std::string unavailable() {
  return fake() ? "" : "the fake libcuda (" ZIP_FAKE_LIBCUDA ") did not load as libcuda.so.1";
}

void* alloc(size_t n) { return fake()->alloc(n, 0); }

void release(void* p) { fake()->release(p); }

bool upload(void* device_dst, const void* host_src, size_t n) {
  fake()->copy(device_dst, host_src, n);
  return true;
}

bool download(void* host_dst, const void* device_src, size_t n) {
  fake()->copy(host_dst, device_src, n);
  return true;
}

}  // namespace zipccl::verbs::emu_test::gdr
