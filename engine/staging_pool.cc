#include "staging_pool.h"

namespace zipccl {

StagingPool::Buf& StagingPool::Buf::operator=(Buf&& o) noexcept {
  if (this != &o) {
    release();
    p = o.p;
    cap = o.cap;
    gpu_mapped = o.gpu_mapped;
    reg = std::move(o.reg);
    arena_ = std::move(o.arena_);
    o.p = nullptr;
    o.cap = 0;
    o.gpu_mapped = false;
  }
  return *this;
}

void StagingPool::Buf::release() {
  reg.reset();
  if (arena_)
    arena_->free(p);
  else
    delete[] p;
  p = nullptr;
  cap = 0;
  gpu_mapped = false;
  arena_.reset();
}

void StagingPool::allocate(Buf* b, size_t bytes) {
  b->release();
  b->p = arena_ ? arena_->alloc(bytes) : nullptr;
  if (b->p) {
    b->arena_ = arena_;
    b->gpu_mapped = true;
  } else {
    b->p = new char[bytes];
  }
  b->cap = bytes;
  // Without a registration a message registers the buffer itself: slower, still correct.
  if (link_->reg_mem(b->p, bytes, &b->reg) != ncclSuccess) b->reg.reset();
}

StagingPool::Buf StagingPool::take(size_t bytes) {
  int best = -1;
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].cap >= bytes && (best < 0 || free_[i].cap < free_[size_t(best)].cap)) best = int(i);
  if (best < 0 && !free_.empty()) {
    best = 0;
    for (size_t i = 1; i < free_.size(); ++i)
      if (free_[i].cap > free_[size_t(best)].cap) best = int(i);
    held_ -= free_[size_t(best)].cap;
    allocate(&free_[size_t(best)], bytes);
    held_ += bytes;
  }
  if (best < 0) {
    held_ += bytes;
    Buf b;
    allocate(&b, bytes);
    return b;
  }
  Buf b = std::move(free_[size_t(best)]);
  free_.erase(free_.begin() + best);
  return b;
}

void StagingPool::give(Buf b) {
  if (b.p) free_.push_back(std::move(b));
}

}  // namespace zipccl
