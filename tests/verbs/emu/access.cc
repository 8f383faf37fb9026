#include "access.h"

#include <cstring>

#include "cuda.h"

namespace zipccl::verbs::emu {
namespace {

Span resolve(const Mr* mr, const Pd* pd, uint64_t addr, uint64_t len, int need) {
  if (!mr || mr->pd != pd || (mr->access & need) != need) return {};
  // Written so that no sum can wrap.
  if (addr < mr->iova || len > mr->length || addr - mr->iova > mr->length - len) return {};
  return {mr->host + (addr - mr->iova), mr->device};
}

}  // namespace

Span local_address(Emu& e, const Pd* pd, uint32_t lkey, uint64_t addr, uint64_t len, int need) {
  auto it = e.lkeys.find(lkey);
  return resolve(it == e.lkeys.end() ? nullptr : it->second, pd, addr, len, need);
}

Span remote_address(Emu& e, const Pd* pd, uint32_t rkey, uint64_t addr, uint64_t len, int need) {
  auto it = e.rkeys.find(rkey);
  return resolve(it == e.rkeys.end() ? nullptr : it->second, pd, addr, len, need);
}

bool sges_valid(Emu& e, const Pd* pd, const std::vector<ibv_sge>& sges, int need) {
  for (const ibv_sge& s : sges) {
    if (s.length && !local_address(e, pd, s.lkey, s.addr, s.length, need).at) return false;
  }
  return true;
}

bool read_span(const Span& from, void* to, uint64_t n) {
  if (from.device >= 0) return cuda_copy(from.device, to, from.at, n);
  std::memcpy(to, from.at, n);
  return true;
}

bool write_span(const Span& to, const void* from, uint64_t n) {
  if (to.device >= 0) return cuda_copy(to.device, to.at, from, n);
  std::memcpy(to.at, from, n);
  return true;
}

}  // namespace zipccl::verbs::emu
