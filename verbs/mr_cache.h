// Memory registrations of one protection domain, shared by every connection on it: a buffer NCCL
// registers (regMr) and every transfer inside it use one ibv_mr. Registrations cover whole pages
// (as NCCL's), are found by interval (any registration covering a transfer serves it) and are
// reference counted: the last reference deregisters. Nothing stays registered without an owner,
// since memory freed and reused behind a cached registration would keep the old pages pinned
// under the old keys (the RDMA would then miss the new data).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ibv_loader.h"
#include "status.h"

namespace zipccl::verbs {

class MrCache;

// One reference to a registration; releases it when destroyed.
class MrRef {
 public:
  MrRef() = default;
  MrRef(MrRef&& o) noexcept;
  MrRef& operator=(MrRef&& o) noexcept;
  ~MrRef();
  explicit operator bool() const { return mr_ != nullptr; }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }

 private:
  friend class MrCache;
  MrRef(std::shared_ptr<MrCache> cache, ibv_mr* mr, uintptr_t end)
      : cache_(std::move(cache)), mr_(mr), end_(end) {}
  std::shared_ptr<MrCache> cache_;
  ibv_mr* mr_ = nullptr;
  uintptr_t end_ = 0;  // the entry's key in the cache
};

// A DMA-BUF exported for device memory, as NCCL hands it to regMrDmaBuf.
struct DmaBuf {
  int fd;
  uint64_t offset;
};

class MrCache : public std::enable_shared_from_this<MrCache> {
 public:
  // keep_alive: whatever must outlive the registrations (the context that owns pd).
  // relaxed_ordering: registrations allow PCIe relaxed ordering (IBV_ACCESS_RELAXED_ORDERING, through
  // ibv_reg_mr_iova2, as NCCL does), which some platforms need for full bandwidth.
  MrCache(std::shared_ptr<const void> keep_alive, const IbvFunctions& fn, ibv_pd* pd, std::string dev,
          bool relaxed_ordering = false);
  bool relaxed_ordering() const { return relaxed_; }
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // A reference to a registration covering [addr, addr + len): an existing one, else a new one
  // of the enclosing pages (local write, remote read and write). Logs and fails when the
  // registration fails.
  // With a DMA-BUF (fd >= 0, addr at `offset` in it) a new registration is ibv_reg_dmabuf_mr of
  // the same pages, at their addresses (GPU memory without nvidia-peermem).
  ncclResult_t acquire(const void* addr, size_t len, MrRef* out, DmaBuf dmabuf = DmaBuf{-1, 0});
  size_t registrations() const;

 private:
  friend class MrRef;
  struct Entry {
    uintptr_t start;
    ibv_mr* mr;
    int refs;
  };
  void release(ibv_mr* mr, uintptr_t end);
  // A reference to a registration covering [a, e), if there is one; call with mu_ held.
  bool take_existing(uintptr_t a, uintptr_t e, MrRef* out);
  void dereg(ibv_mr* mr);

  std::shared_ptr<const void> keep_alive_;
  const IbvFunctions& fn_;
  ibv_pd* pd_;
  std::string dev_;
  bool relaxed_;
  mutable std::mutex mu_;
  // Keyed by the registration's end: the first entry ending at or after a range's end is the
  // one covering it whenever registrations do not overlap (the usual case); overlaps are scanned.
  std::multimap<uintptr_t, Entry> by_end_;
};

}  // namespace zipccl::verbs
