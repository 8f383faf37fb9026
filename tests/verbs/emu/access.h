// Key, range and access checks: the only way the emulation turns a key and an address into a
// pointer, so memory is never touched before they pass. Call with Emu::mu held.
#pragma once

#include <cstdint>

#include "state.h"

namespace zip::verbs::emu {

// Where [addr, addr + len) of the MR that key names lands in this process, or null when key is
// not an MR of pd (as an lkey, or an rkey when remote), the range leaves it, or the MR lacks any
// of the access flags in need.
char* local_address(Emu& e, const Pd* pd, uint32_t lkey, uint64_t addr, uint64_t len, int need);
char* remote_address(Emu& e, const Pd* pd, uint32_t rkey, uint64_t addr, uint64_t len, int need);

// The same over a scatter/gather list (zero-length entries are not checked, as no byte moves
// through them); false when any entry fails.
bool sges_valid(Emu& e, const Pd* pd, const std::vector<ibv_sge>& sges, int need);

}  // namespace zip::verbs::emu
