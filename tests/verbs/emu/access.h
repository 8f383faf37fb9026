// Key, range and access checks: the only way the emulation turns a key and an address into a
// pointer, so memory is never touched before they pass. Call with Emu::mu held.
#pragma once

#include <cstdint>

#include "state.h"

namespace zipccl::verbs::emu {

// Where a checked range lands in this process: host memory, or memory of CUDA device `device`
// (an MR of device memory), which the CPU cannot touch: move bytes with read_span/write_span.
struct Span {
  char* at = nullptr;
  int device = -1;
};

// Where [addr, addr + len) of the MR that key names lands, or a null span when key is not an MR
// of pd (as an lkey, or an rkey when remote), the range leaves it, or the MR lacks any of the
// access flags in need.
Span local_address(Emu& e, const Pd* pd, uint32_t lkey, uint64_t addr, uint64_t len, int need);
Span remote_address(Emu& e, const Pd* pd, uint32_t rkey, uint64_t addr, uint64_t len, int need);

// n bytes between a span and host memory: memcpy, or a CUDA copy for device memory. False when
// CUDA fails (the reason on stderr).
bool read_span(const Span& from, void* to, uint64_t n);
bool write_span(const Span& to, const void* from, uint64_t n);

// The same over a scatter/gather list (zero-length entries are not checked, as no byte moves
// through them); false when any entry fails.
bool sges_valid(Emu& e, const Pd* pd, const std::vector<ibv_sge>& sges, int need);

}  // namespace zipccl::verbs::emu
