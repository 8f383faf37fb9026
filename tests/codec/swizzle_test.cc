// The staged-chunk layout of the GPU kernels (kernels/cuda/swizzle.h), checked on the CPU: the
// identities the kernels' address arithmetic relies on, and the bank spread the swizzle is for.
#include <gtest/gtest.h>

#include <set>

#include "swizzle.h"

namespace zipccl::gpu::detail {
namespace {

// Section and block bases are multiples of 32 chunks and are added after the swizzle.
TEST(Swizzle, BasesOfThirtyTwoChunksAddPlainly) {
  for (uint32_t b = 0; b <= 4096; b += 32)
    for (uint32_t c = 0; c < 4096; ++c) ASSERT_EQ(swz(b + c), b + swz(c)) << b << " + " << c;
}

// The encoder reads thread t's element j at own_base(t, eb) ^ (j * eb); the general rule puts
// byte offset off of a block at 16 swz(off / 16) + off % 16. 128-thread CTAs (bulk launches)
// give a thread 32 elements: at own_base(t, 2 eb) ^ (j eb).
TEST(Swizzle, OwnElementsOfEveryThread) {
  for (uint32_t eb : {2u, 4u}) {
    for (uint32_t t = 0; t < 256; ++t)
      for (uint32_t j = 0; j < 16; ++j) {
        const uint32_t off = (16 * t + j) * eb;
        ASSERT_EQ(own_base(t, eb) ^ (j * eb), 16 * swz(off / 16) + off % 16) << eb << " " << t << " " << j;
      }
    for (uint32_t t = 0; t < 128; ++t)
      for (uint32_t j = 0; j < 32; ++j) {
        const uint32_t off = (32 * t + j) * eb;
        ASSERT_EQ(own_base(t, 2 * eb) ^ (j * eb), 16 * swz(off / 16) + off % 16) << eb << " " << t << " " << j;
      }
  }
}

// A 16-byte vector covers 4 of the 32 banks, so 8 lanes are conflict-free when their chunks
// differ modulo 8: lanes reading their q-th chunk at a stride of 2 or 4 chunks, and 8
// consecutive chunks (the copies).
TEST(Swizzle, EightLanesSpreadOverAllBanks) {
  for (uint32_t stride : {2u, 4u})
    for (uint32_t q = 0; q < stride; ++q)
      for (uint32_t t0 = 0; t0 < 256; t0 += 8) {
        std::set<uint32_t> groups;
        for (uint32_t i = 0; i < 8; ++i) groups.insert(swz(stride * (t0 + i) + q) % 8);
        EXPECT_EQ(groups.size(), 8u) << "stride " << stride << " chunk " << q << " lanes " << t0;
      }
  for (uint32_t g0 = 0; g0 < 4096; g0 += 8) {
    std::set<uint32_t> groups;
    for (uint32_t i = 0; i < 8; ++i) groups.insert(swz(g0 + i) % 8);
    EXPECT_EQ(groups.size(), 8u) << "chunks " << g0;
  }
}

}  // namespace
}  // namespace zipccl::gpu::detail
