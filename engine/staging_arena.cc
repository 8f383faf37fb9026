#include "staging_arena.h"

#include <iterator>

namespace zipccl {

StagingArena::StagingArena(char* base, size_t size, std::function<void(char*)> release)
    : base_(base), size_(size / kGrain * kGrain), release_(std::move(release)) {
  if (size_) free_[0] = size_;
}

StagingArena::~StagingArena() {
  if (release_) release_(base_);
}

char* StagingArena::alloc(size_t bytes) {
  const size_t n = (bytes ? bytes + kGrain - 1 : kGrain) / kGrain * kGrain;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const size_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > n) free_[off + n] = len - n;
    used_[off] = n;
    used_bytes_ += n;
    return base_ + off;
  }
  return nullptr;
}

void StagingArena::free(char* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lk(mu_);
  const auto u = used_.find(size_t(p - base_));
  if (u == used_.end()) return;
  size_t off = u->first, len = u->second;
  used_.erase(u);
  used_bytes_ -= len;
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {  // merge with the range after
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // and with the one before
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  free_[off] = len;
}

size_t StagingArena::used() const {
  std::lock_guard<std::mutex> lk(mu_);
  return used_bytes_;
}

}  // namespace zipccl
