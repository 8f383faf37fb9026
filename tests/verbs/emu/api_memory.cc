// Protection domains and memory regions. Nothing is pinned: an MR records where its iova range
// lands in this process (host memory, or CUDA device memory for GPUDirect RDMA), and keys are
// only honoured while it is registered.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "api.h"
#include "cuda.h"
#include "state.h"

using namespace zipccl::verbs::emu;

namespace {

constexpr int kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
                             IBV_ACCESS_HUGETLB;

// Pinning fails with EFAULT on unmapped memory; mincore tells the same without pinning.
bool mapped(const void* addr, size_t length) {
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t start = reinterpret_cast<uintptr_t>(addr) & ~static_cast<uintptr_t>(page - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(addr) + length;
  std::vector<unsigned char> vec((end - start + page - 1) / page);
  return mincore(reinterpret_cast<void*>(start), end - start, vec.data()) == 0;
}

// How the memory is handed to the HCA: a virtual address it pins (ibv_reg_mr, _iova2), or a
// DMA-BUF fd (ibv_reg_dmabuf_mr).
struct Source {
  bool dmabuf = false;
  int fd = -1;
};

ibv_mr* register_mr(ibv_pd* pd, char* host, size_t length, uint64_t iova, unsigned access,
                    Source source = {}) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Pd* p = find(e, pd);
  if (!p) return fail_null<ibv_mr>(EINVAL);
  if (p->ctx->lost) return fail_null<ibv_mr>(EIO);
  // Without kernel support rdma-core refuses before looking at anything; with it the fd comes
  // first. NCCL's probe (fd -1, length 0) tells the two apart by EBADF vs EOPNOTSUPP.
  if (source.dmabuf && !p->ctx->gdr.dmabuf) return fail_null<ibv_mr>(EOPNOTSUPP);
  if (source.dmabuf && (source.fd < 0 || fcntl(source.fd, F_GETFD) < 0)) {
    return fail_null<ibv_mr>(EBADF);
  }
  // Access bits beyond the optional range must be known; remote write (and atomics) need local
  // write, as the kernel insists.
  unsigned mandatory = access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if ((mandatory & ~static_cast<unsigned>(kKnownAccess)) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
       !(access & IBV_ACCESS_LOCAL_WRITE))) {
    return fail_null<ibv_mr>(EINVAL);
  }
  if (length == 0 || length > kMaxMsg * 512 || iova + length < iova) return fail_null<ibv_mr>(EINVAL);
  // Device memory is asked about once, here, so transfers do not query CUDA. Pinning it through
  // a virtual address needs nvidia-peermem; without it the pin fails as on any unmapped page.
  int device = cuda_device_of(host, length);
  if (device >= 0 && !source.dmabuf && !p->ctx->gdr.peermem) return fail_null<ibv_mr>(EFAULT);
  if (device < 0 && !mapped(host, length)) return fail_null<ibv_mr>(EFAULT);
  auto mr = std::make_unique<Mr>();
  mr->device = device;
  mr->pd = p;
  mr->iova = iova;
  mr->host = host;
  mr->length = length;
  mr->access = static_cast<int>(access);
  ibv_mr& v = mr->verbs;
  v.context = pd->context;
  v.pd = pd;
  v.addr = host;
  v.length = length;
  v.handle = e.next_handle++;
  v.lkey = new_key(e);
  e.lkeys[v.lkey] = mr.get();
  v.rkey = new_key(e);
  e.rkeys[v.rkey] = mr.get();
  ++p->refs;
  return &e.mrs.emplace(&v, std::move(mr)).first->second->verbs;
}

}  // namespace

ZIP_EMU_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Context* c = find(e, context);
  if (!c) return fail_null<ibv_pd>(EINVAL);
  if (c->lost) return fail_null<ibv_pd>(EIO);
  auto pd = std::make_unique<Pd>();
  pd->ctx = c;
  pd->verbs.context = context;
  pd->verbs.handle = e.next_handle++;
  return &e.pds.emplace(&pd->verbs, std::move(pd)).first->second->verbs;
}

ZIP_EMU_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Pd* p = find(e, pd);
  if (!p) return EINVAL;
  if (p->refs) return EBUSY;
  drop_pd(e, p);
  return 0;
}

// verbs.h's ibv_reg_mr macro calls this when the access flags are a constant without optional
// bits, ibv_reg_mr_iova2 otherwise.
ZIP_EMU_EXPORT ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  return register_mr(pd, static_cast<char*>(addr), length, reinterpret_cast<uintptr_t>(addr),
                     static_cast<unsigned>(access));
}

ZIP_EMU_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                        unsigned int access) {
  return register_mr(pd, static_cast<char*>(addr), length, iova, access);
}

// The emulation cannot map a DMA-BUF: it checks that fd is open and takes iova as the address of
// the memory in this process (what a caller registering a buffer it also maps passes, a CUDA
// device pointer included; offset is ignored).
ZIP_EMU_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t /*offset*/, size_t length,
                                         uint64_t iova, int fd, int access) {
  return register_mr(pd, reinterpret_cast<char*>(static_cast<uintptr_t>(iova)), length, iova,
                     static_cast<unsigned>(access), Source{true, fd});
}

ZIP_EMU_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  auto it = e.mrs.find(mr);
  if (it == e.mrs.end()) return EINVAL;
  drop_mr(e, it->second.get());
  return 0;
}
