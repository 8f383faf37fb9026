// Shared-memory slots of the 16-byte chunks that both GPU kernels stage, host-compilable so
// that the CPU tests (tests/codec/swizzle_test.cc) check the identities the kernels rely on.
#pragma once

#include <cstdint>

#include "zipccl/format.h"

namespace zipccl::gpu::detail {

// Slot of chunk g. Threads read 16-byte vectors at a stride of 32 or 64 bytes; XOR-ing bits 3-4
// of the index into bits 0-1 spreads each group of 8 lanes over all 32 banks, and keeps
// consecutive chunks (cp.async writes) conflict-free. (At a stride of 128 bytes - fp32 in the
// bulk encode kernels - 8 lanes meet 4 bank groups: two-way conflicts.) swz(b + c) == b + swz(c)
// when b is a multiple of 32: callers swizzle a thread's own offset once and add section bases
// as plain offsets.
ZIPCCL_HD uint32_t swz(uint32_t g) {
  return g ^ ((g >> 3) & 3);
}

// Thread t's 16 elements of eb bytes in a staged block are its chunks swz(eb t) ^ q (q < eb),
// so its element j lies at byte own_base(t, eb) ^ (j eb) of the block.
ZIPCCL_HD uint32_t own_base(uint32_t t, uint32_t eb) {
  return 16 * swz(eb * t);
}

}  // namespace zipccl::gpu::detail
