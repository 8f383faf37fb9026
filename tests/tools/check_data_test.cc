// The NCCL checker's inputs and expectations (bench/nccl/check_data): deterministic per case and
// rank, small integers exact in every type, conversions that round-trip, real tensors loaded.
#include "check_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

namespace zipccl::check {
namespace {

constexpr DType kTypes[] = {DType::BF16, DType::FP16, DType::FP32, DType::INT32, DType::INT8};

TEST(CheckData, InputsAreDeterministicPerCaseAndRank) {
  const RealPool none;
  for (DType t : kTypes)
    for (Fill f : {Fill::Gauss, Fill::Bytes, Fill::Ints}) {
      const Bytes a = make_input(t, f, 1001, 7, 2, none);
      ASSERT_EQ(a.size(), 1001 * dtype_bytes(t));
      EXPECT_EQ(a, make_input(t, f, 1001, 7, 2, none)) << dtype_name(t) << " " << fill_name(f);
      EXPECT_NE(a, make_input(t, f, 1001, 7, 3, none)) << "another rank";
      EXPECT_NE(a, make_input(t, f, 1001, 8, 2, none)) << "another case";
    }
}

TEST(CheckData, SmallIntegersAreExactInEveryType) {
  const RealPool none;
  for (DType t : kTypes) {
    const Bytes a = make_input(t, Fill::Ints, 5000, 3, 0, none);
    int seen_min = 0, seen_max = 0;
    for (size_t i = 0; i < 5000; ++i) {
      const double v = value(t, a.data(), i);
      ASSERT_EQ(v, std::floor(v)) << dtype_name(t);
      ASSERT_LE(std::abs(v), 8) << dtype_name(t);
      seen_min = std::min(seen_min, int(v));
      seen_max = std::max(seen_max, int(v));
    }
    EXPECT_EQ(seen_min, -8);
    EXPECT_EQ(seen_max, 8);
    Bytes b(dtype_bytes(t));
    for (int v = -128; v <= 128; ++v) {  // every sum of up to 16 ranks
      put_int(t, b.data(), 0, v);
      if (t != DType::INT8 || (v >= -128 && v <= 127)) {
        EXPECT_EQ(value(t, b.data(), 0), v) << dtype_name(t);
      }
    }
  }
}

TEST(CheckData, IntegerSumsWrapAsTheGpusDo) {
  Bytes b(4);
  put_int(DType::INT8, b.data(), 0, 300);
  EXPECT_EQ(value(DType::INT8, b.data(), 0), 44);
  put_int(DType::INT32, b.data(), 0, int64_t(INT32_MAX) + 2);
  EXPECT_EQ(value(DType::INT32, b.data(), 0), double(INT32_MIN) + 1);
}

TEST(CheckData, GaussianIsSmallAndFinite) {
  const RealPool none;
  for (DType t : {DType::BF16, DType::FP16, DType::FP32}) {
    const Bytes a = make_input(t, Fill::Gauss, 10000, 5, 1, none);
    double sq = 0;
    for (size_t i = 0; i < 10000; ++i) {
      const double v = value(t, a.data(), i);
      ASSERT_TRUE(std::isfinite(v));
      sq += v * v;
    }
    EXPECT_NEAR(std::sqrt(sq / 10000), 0.02, 0.002) << dtype_name(t);
  }
}

TEST(CheckData, DigestSeesEveryByte) {
  Bytes a(4096, 1), b = a;
  b[4095] ^= 1;
  EXPECT_NE(digest(a.data(), a.size()), digest(b.data(), b.size()));
  EXPECT_EQ(digest(a.data(), a.size()), digest(a.data(), a.size()));
}

TEST(CheckData, RealTensorsLoad) {
  const char* dir = std::getenv("ZIPCCL_DATA_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "ZIPCCL_DATA_DIR not set";
  RealPool pool;
  std::string err;
  ASSERT_TRUE(pool.load(dir, &err)) << err;
  EXPECT_TRUE(pool.has(DType::BF16));
  EXPECT_FALSE(pool.has(DType::FP16));
  const Bytes a = make_input(DType::BF16, Fill::Real, 3000, 1, 0, pool);
  const Bytes b = make_input(DType::BF16, Fill::Real, 3000, 1, 1, pool);
  EXPECT_NE(a, b) << "each rank a different window";
  RealPool empty;
  EXPECT_FALSE(empty.load("/nonexistent", &err));
}

}  // namespace
}  // namespace zipccl::check
