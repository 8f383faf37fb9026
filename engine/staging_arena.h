// Staging memory the GPU codec can address (pinned host memory mapped for the device, or device
// memory): allocated once where CUDA calls may block, then carved and returned without any CUDA
// call, so the data path never allocates (cudaHostAlloc and cudaMalloc may wait for the device,
// and NCCL's kernel may be waiting for the very message being staged).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>

namespace zipccl {

class StagingArena {
 public:
  // [base, base + size) is handed out; release(base) runs when the arena goes.
  StagingArena(char* base, size_t size, std::function<void(char*)> release);
  ~StagingArena();
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  // A range of at least `bytes` (first fit, in kGrain units), or null when none is free.
  char* alloc(size_t bytes);
  void free(char* p);
  char* base() const { return base_; }
  size_t size() const { return size_; }
  size_t used() const;

  static constexpr size_t kGrain = 4096;

 private:
  char* const base_;
  const size_t size_;
  std::function<void(char*)> release_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length, coalesced
  std::map<size_t, size_t> used_;  // offset -> length
  size_t used_bytes_ = 0;
};

}  // namespace zipccl
