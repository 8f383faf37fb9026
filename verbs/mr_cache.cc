#include "mr_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "log.h"

namespace zipccl::verbs {

MrRef::MrRef(MrRef&& o) noexcept : cache_(std::move(o.cache_)), mr_(o.mr_), end_(o.end_) { o.mr_ = nullptr; }

MrRef& MrRef::operator=(MrRef&& o) noexcept {
  if (this != &o) {
    if (mr_) cache_->release(mr_, end_);
    cache_ = std::move(o.cache_);
    mr_ = o.mr_;
    end_ = o.end_;
    o.mr_ = nullptr;
  }
  return *this;
}

MrRef::~MrRef() {
  if (mr_) cache_->release(mr_, end_);
}

MrCache::MrCache(std::shared_ptr<const void> keep_alive, const IbvFunctions& fn, ibv_pd* pd, std::string dev,
                 bool relaxed_ordering)
    : keep_alive_(std::move(keep_alive)), fn_(fn), pd_(pd), dev_(std::move(dev)),
      relaxed_(relaxed_ordering && fn.reg_mr_iova2) {}

MrCache::~MrCache() {
  // Every MrRef holds the cache, so nothing is left here; this only guards against leaks.
  for (auto& kv : by_end_) fn_.dereg_mr(kv.second.mr);
}

bool MrCache::take_existing(uintptr_t a, uintptr_t e, MrRef* out) {
  for (auto it = by_end_.lower_bound(e); it != by_end_.end(); ++it) {
    if (it->second.start <= a) {
      it->second.refs++;
      *out = MrRef(shared_from_this(), it->second.mr, it->first);
      return true;
    }
  }
  return false;
}

// Pinning memory can take long (large buffers): ibv_reg_mr and ibv_dereg_mr run outside the
// lock, which progress threads of every connection on this HCA take for each transfer.
ncclResult_t MrCache::acquire(const void* addr, size_t len, MrRef* out, DmaBuf dmabuf) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t e = a + (len ? len : 1);
  {
    std::lock_guard<std::mutex> g(mu_);
    if (take_existing(a, e, out)) return ncclSuccess;
  }
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t start = a & ~(page - 1);
  const uintptr_t end = (e + page - 1) & ~(page - 1);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     (relaxed_ ? IBV_ACCESS_RELAXED_ORDERING : 0);
  ibv_mr* mr = nullptr;
  if (dmabuf.fd < 0 && relaxed_) {  // the optional access bit needs the 1.8 entry point
    mr = fn_.reg_mr_iova2(pd_, reinterpret_cast<void*>(start), end - start, start, unsigned(access));
  } else if (dmabuf.fd < 0) {
    mr = fn_.reg_mr(pd_, reinterpret_cast<void*>(start), end - start, access);
  } else if (dmabuf.offset < a - start) {  // the fd does not reach back to the page start
    errno = EINVAL;
  } else if (fn_.reg_dmabuf_mr) {
    mr = fn_.reg_dmabuf_mr(pd_, dmabuf.offset - (a - start), end - start, start, dmabuf.fd, access);
  } else {
    errno = EOPNOTSUPP;
  }
  if (!mr) {
    ZIP_WARN("%s: %s of %p (%zu bytes%s) failed: %s", dev_.c_str(), dmabuf.fd < 0 ? "ibv_reg_mr" : "ibv_reg_dmabuf_mr",
             addr, len, dmabuf.fd < 0 ? "" : (", fd " + std::to_string(dmabuf.fd) + " offset " +
                                             std::to_string(dmabuf.offset)).c_str(), std::strerror(errno));
    return ncclSystemError;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!take_existing(a, e, out)) {  // else another thread registered it meanwhile: ours goes
      by_end_.emplace(end, Entry{start, mr, 1});
      ZIP_TRACE("%s: registered %#lx..%#lx (lkey %#x rkey %#x)", dev_.c_str(), (unsigned long)start,
                (unsigned long)end, mr->lkey, mr->rkey);
      *out = MrRef(shared_from_this(), mr, end);
      return ncclSuccess;
    }
  }
  dereg(mr);
  return ncclSuccess;
}

void MrCache::release(ibv_mr* mr, uintptr_t end) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto range = by_end_.equal_range(end);
    auto it = range.first;
    while (it != range.second && it->second.mr != mr) ++it;
    if (it == range.second || --it->second.refs > 0) return;
    by_end_.erase(it);
  }
  dereg(mr);
}

void MrCache::dereg(ibv_mr* mr) {
  if (fn_.dereg_mr(mr) != 0) ZIP_WARN("%s: ibv_dereg_mr failed: %s", dev_.c_str(), std::strerror(errno));
}

size_t MrCache::registrations() const {
  std::lock_guard<std::mutex> g(mu_);
  return by_end_.size();
}

}  // namespace zipccl::verbs
