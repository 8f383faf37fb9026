// A stand-in for libcuda.so.1 (soname and all) with the driver calls the emulation makes, so its
// GPUDirect RDMA data path runs on machines without a GPU. "Device memory" is host pages mapped
// PROT_NONE: any byte the emulation moved with the CPU instead of cuMemcpyAsync would fault.
// Copies check that the owning device's context is current. The zip_fake_cuda_* calls are the
// tests' side: allocate, peek and poke, count copies, make copies fail.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;     // CUDA_ERROR_INVALID_VALUE
constexpr int kInvalidContext = 201;  // CUDA_ERROR_INVALID_CONTEXT
constexpr int kAttrMemoryType = 2;
constexpr int kAttrDeviceOrdinal = 9;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr unsigned kStreamNonBlocking = 1;

struct Allocation {
  size_t size;
  int device;
};

std::mutex mu;
std::map<uintptr_t, Allocation> allocations;  // by base address
uint64_t copies = 0;
bool fail_copies = false;
thread_local std::vector<void*> ctx_stack;

void* ctx_of(int device) { return reinterpret_cast<void*>(static_cast<uintptr_t>(device) + 1); }

// The allocation holding p, or null. Call with mu held.
const std::pair<const uintptr_t, Allocation>* find(uintptr_t p) {
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return nullptr;
  --it;
  return p < it->first + it->second.size ? &*it : nullptr;
}

void protect(const std::pair<const uintptr_t, Allocation>* a, int prot) {
  if (a) mprotect(reinterpret_cast<void*>(a->first), a->second.size, prot);
}

// memcpy with the fake device pages opened around it. Call with mu held.
void copy_open(void* dst, const void* src, size_t n) {
  auto* d = find(reinterpret_cast<uintptr_t>(dst));
  auto* s = find(reinterpret_cast<uintptr_t>(src));
  protect(d, PROT_READ | PROT_WRITE);
  protect(s, PROT_READ | PROT_WRITE);
  std::memcpy(dst, src, n);
  protect(d, PROT_NONE);
  protect(s, PROT_NONE);
}

}  // namespace

// Exported despite the project's hidden default visibility.
#pragma GCC visibility push(default)
extern "C" {

int cuPointerGetAttribute(void* data, int attribute, uintptr_t ptr) {
  std::lock_guard<std::mutex> lock(mu);
  auto* a = find(ptr);
  if (!a) return kInvalidValue;  // what the driver says of memory it does not know
  if (attribute == kAttrMemoryType) {
    *static_cast<unsigned*>(data) = kMemoryTypeDevice;
  } else if (attribute == kAttrDeviceOrdinal) {
    *static_cast<int*>(data) = a->second.device;
  } else {
    return kInvalidValue;
  }
  return kSuccess;
}

int cuDeviceGet(int* device, int ordinal) {
  *device = ordinal;
  return kSuccess;
}

int cuDevicePrimaryCtxRetain(void** ctx, int device) {
  *ctx = ctx_of(device);
  return kSuccess;
}

int cuCtxPushCurrent_v2(void* ctx) {
  ctx_stack.push_back(ctx);
  return kSuccess;
}

int cuCtxPopCurrent_v2(void** ctx) {
  if (ctx_stack.empty()) return kInvalidContext;
  *ctx = ctx_stack.back();
  ctx_stack.pop_back();
  return kSuccess;
}

int cuStreamCreate(void** stream, unsigned flags) {
  if (ctx_stack.empty()) return kInvalidContext;
  if (flags != kStreamNonBlocking) return kInvalidValue;  // the emulation must not sync with the app
  *stream = ctx_stack.back();  // a stream belongs to its context
  return kSuccess;
}

int cuMemcpyAsync(uintptr_t dst, uintptr_t src, size_t n, void* stream) {
  std::lock_guard<std::mutex> lock(mu);
  if (ctx_stack.empty() || stream != ctx_stack.back()) return kInvalidContext;
  for (uintptr_t p : {dst, src}) {
    auto* a = find(p);
    if (a && ctx_of(a->second.device) != ctx_stack.back()) return kInvalidContext;
  }
  if (fail_copies) return kInvalidValue;
  copy_open(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  ++copies;
  return kSuccess;
}

int cuStreamSynchronize(void* stream) { return stream ? kSuccess : kInvalidValue; }

void* zip_fake_cuda_alloc(size_t n, int device) {
  long page = sysconf(_SC_PAGESIZE);
  size_t size = (n + page - 1) / page * page;
  void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  allocations[reinterpret_cast<uintptr_t>(p)] = {size, device};
  return p;
}

void zip_fake_cuda_free(void* p) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == allocations.end()) return;
  munmap(p, it->second.size);
  allocations.erase(it);
}

void zip_fake_cuda_copy(void* dst, const void* src, size_t n) {
  std::lock_guard<std::mutex> lock(mu);
  copy_open(dst, src, n);
}

uint64_t zip_fake_cuda_copies() {
  std::lock_guard<std::mutex> lock(mu);
  return copies;
}

void zip_fake_cuda_fail_copies(bool fail) {
  std::lock_guard<std::mutex> lock(mu);
  fail_copies = fail;
}

}  // extern "C"
#pragma GCC visibility pop
