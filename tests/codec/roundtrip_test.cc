#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "zipccl/codec.h"

using namespace zipccl;

TEST(Smoke, GaussianBf16) {
  std::mt19937 g(1);
  std::normal_distribution<float> d(0, 0.02f);
  std::vector<uint16_t> v(100000);
  for (auto& x : v) { float f = d(g); uint32_t u; memcpy(&u, &f, 4); x = u >> 16; }
  std::vector<uint8_t> c(max_compressed_bytes(v.size() * 2)), o(v.size() * 2);
  size_t cn = 0, on = 0;
  ASSERT_EQ(encode(Codec::BF16, v.data(), v.size() * 2, c.data(), c.size(), &cn), Status::kOk);
  ASSERT_EQ(decode(c.data(), cn, o.data(), o.size(), &on), Status::kOk);
  ASSERT_EQ(on, v.size() * 2);
  EXPECT_EQ(memcmp(o.data(), v.data(), on), 0);
  printf("ratio %.4f\n", double(cn) / on);
  EXPECT_LT(double(cn) / on, 0.71);
}
