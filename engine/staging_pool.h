// Staging: buffers that hold compressed messages, the sender's codec output and the receiver's
// landing place. Pooled per comm and registered with its link while they exist, so the data path
// does not allocate or register once warm. Host staging: with an arena, buffers come from it while
// it has room (memory the GPU codec can address), else from the heap (the CPU codec's). Device
// staging (device buffers under GPUDirect RDMA, which only the GPU codec reaches): buffers come
// from a device arena only, covered by one registration of the whole arena. A pool gives arena
// buffers back while the arena is more than half used, so that no comm's idle buffers starve
// another's.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "staging_arena.h"
#include "transport.h"

namespace zipccl {

class StagingPool {
 public:
  explicit StagingPool(Link* link, std::shared_ptr<StagingArena> arena = nullptr)
      : link_(link), arena_(std::move(arena)) {}
  // Takes arena memory for buffers allocated from now on (the GPU codec became available).
  void set_arena(std::shared_ptr<StagingArena> arena) { arena_ = std::move(arena); }
  // Makes this a device staging pool: buffers from `arena` only, which `whole` registers.
  void set_device_arena(std::shared_ptr<StagingArena> arena, std::unique_ptr<MemReg> whole) {
    arena_ = std::move(arena);
    whole_ = std::move(whole);
    device_ = true;
  }
  bool device() const { return device_; }

  class Buf {
   public:
    Buf() = default;
    Buf(Buf&& o) noexcept { *this = std::move(o); }
    Buf& operator=(Buf&& o) noexcept;
    ~Buf() { release(); }
    char* p = nullptr;
    size_t cap = 0;
    bool gpu_mapped = false;  // arena memory
    std::unique_ptr<MemReg> reg;

   private:
    friend class StagingPool;
    void release();  // the registration first, then the memory
    std::shared_ptr<StagingArena> arena_;  // p's owner, or null: p came from new[]
  };
  // A buffer of at least `bytes`: the best fit among the free ones, else the largest grown. Device
  // staging: an empty Buf (p null) when the arena has no room.
  Buf take(size_t bytes);
  void give(Buf b);
  size_t held_bytes() const { return held_; }

 private:
  // (Re)allocates b's memory (from_arena: a range already taken from the arena), registration
  // first released and then renewed.
  void allocate(Buf* b, size_t bytes, char* from_arena = nullptr);

  Link* link_;
  std::shared_ptr<StagingArena> arena_;
  bool device_ = false;
  std::vector<Buf> free_;
  size_t held_ = 0;  // bytes allocated, in use or free
  // Device staging's registration of the whole arena; last, so that Bufs (and their arena
  // ranges) go first.
  std::unique_ptr<MemReg> whole_;
};

}  // namespace zipccl
