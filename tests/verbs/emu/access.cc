#include "access.h"

namespace zip::verbs::emu {
namespace {

char* resolve(const Mr* mr, const Pd* pd, uint64_t addr, uint64_t len, int need) {
  if (!mr || mr->pd != pd || (mr->access & need) != need) return nullptr;
  // Written so that no sum can wrap.
  if (addr < mr->iova || len > mr->length || addr - mr->iova > mr->length - len) return nullptr;
  return mr->host + (addr - mr->iova);
}

}  // namespace

char* local_address(Emu& e, const Pd* pd, uint32_t lkey, uint64_t addr, uint64_t len, int need) {
  auto it = e.lkeys.find(lkey);
  return resolve(it == e.lkeys.end() ? nullptr : it->second, pd, addr, len, need);
}

char* remote_address(Emu& e, const Pd* pd, uint32_t rkey, uint64_t addr, uint64_t len, int need) {
  auto it = e.rkeys.find(rkey);
  return resolve(it == e.rkeys.end() ? nullptr : it->second, pd, addr, len, need);
}

bool sges_valid(Emu& e, const Pd* pd, const std::vector<ibv_sge>& sges, int need) {
  for (const ibv_sge& s : sges) {
    if (s.length && !local_address(e, pd, s.lkey, s.addr, s.length, need)) return false;
  }
  return true;
}

}  // namespace zip::verbs::emu
