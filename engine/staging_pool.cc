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

void StagingPool::allocate(Buf* b, size_t bytes, char* from_arena) {
  b->release();
  b->p = from_arena ? from_arena : arena_ ? arena_->alloc(bytes) : nullptr;
  if (b->p) {
    b->arena_ = arena_;
    b->gpu_mapped = true;
  } else if (device_) {
    return;  // the device arena is full: no buffer
  } else {
    b->p = new char[bytes];
  }
  b->cap = bytes;
  if (device_) return;  // covered by the registration of the whole arena
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
    if (!free_[size_t(best)].p) {
      free_.erase(free_.begin() + best);
      return Buf();
    }
    held_ += bytes;
  }
  if (best < 0) {
    Buf b;
    allocate(&b, bytes);
    if (b.p) held_ += bytes;
    return b;
  }
  Buf b = std::move(free_[size_t(best)]);
  free_.erase(free_.begin() + best);
  // A heap buffer from when the arena was full moves into the arena once it has room: only
  // arena memory can be coded by the GPU.
  if (arena_ && !b.gpu_mapped)
    if (char* p = arena_->alloc(bytes)) {
      held_ -= b.cap;
      allocate(&b, bytes, p);
      held_ += bytes;
    }
  return b;
}

void StagingPool::give(Buf b) {
  if (!b.p) return;
  // The arena is shared by every comm of the GPU: while more than half of it is in use, a
  // comm's free buffers go back to it rather than wait in this comm's pool (connections made
  // later, such as NCCL's point-to-point ones, found it full and never coded on the GPU).
  if (b.arena_ && b.arena_->used() > b.arena_->size() / 2) {
    held_ -= b.cap;
    return;  // b releases its registration, then its range
  }
  free_.push_back(std::move(b));
}

}  // namespace zipccl
