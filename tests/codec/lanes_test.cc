// The GPU codec's 16-element SWAR coding and decoding (kernels/cuda/lanes.h), run on the host:
// every bf16 and fp16 pattern under every window base, against format.h's scalar definitions
// that the CPU codec uses. The GPU tests then check the kernels end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "lanes.h"

namespace zipccl::lanes {
namespace {

// Bit p of each of 8 nibble-packed elements, gathered by multiplication, for every bit
// combination and with the other nibble bits set at random.
TEST(Lanes, Gather8EveryCombination) {
  std::mt19937 g(1);
  for (int p = 0; p < 3; ++p) {
    for (uint32_t bits = 0; bits < 256; ++bits) {
      uint32_t x = g() & ~(0x11111111u << p);
      for (int j = 0; j < 8; ++j)
        if (bits >> j & 1) x |= 1u << (8 * (j % 4) + 4 * (j / 4) + p);
      ASSERT_EQ(gather8(x, p) >> 24, bits) << "p=" << p << " x=" << x;
    }
  }
}

// Checks code16 on 16 elements against exp_code / elem_residual / fp16_extra, and escapes16
// against code16's escape mask.
template <Codec C>
::testing::AssertionResult check_group(const uint16_t* v, uint32_t base) {
  uint32_t w[8];
  for (int i = 0; i < 8; ++i) w[i] = v[2 * i] | uint32_t(v[2 * i + 1]) << 16;
  uint32_t res[4], planes[Lanes<C>::K];
  const uint32_t esc = code16<C>(w, base, res, planes);
  for (int j = 0; j < 16; ++j) {
    const uint32_t code = exp_code(elem_exponent(C, v[j]), base);
    const uint32_t sym = code | (C == Codec::FP16 ? fp16_extra(v[j]) << 3 : 0);
    const uint32_t got_res = (res[j / 4] >> (8 * (j % 4))) & 0xFF;
    if (got_res != elem_residual(C, v[j], 0))
      return ::testing::AssertionFailure() << "residual of " << v[j] << " base " << base;
    if (((esc >> j) & 1) != (code == 0))
      return ::testing::AssertionFailure() << "escape of " << v[j] << " base " << base;
    for (int k = 0; k < Lanes<C>::K; ++k)
      if (((planes[k] >> j) & 1) != ((sym >> k) & 1))
        return ::testing::AssertionFailure() << "plane " << k << " of " << v[j] << " base " << base;
  }
  if (esc >> 16) return ::testing::AssertionFailure() << "escape mask above bit 15";
  if (escapes16<C>(w, base) != uint32_t(__builtin_popcount(esc)))
    return ::testing::AssertionFailure() << "escapes16 " << escapes16<C>(w, base) << " for mask " << esc << " base "
                                         << base;
  int32_t down = 0, up = 0;  // by exp_code(), as refine_window_base() weighs them
  for (int j = 0; j < 16; ++j) {
    const uint32_t e = elem_exponent(C, v[j]);
    if (base > 0) down += int32_t(exp_code(e, base - 1) == 0) - int32_t(exp_code(e, base) == 0);
    up += int32_t(exp_code(e, base + 1) == 0) - int32_t(exp_code(e, base) == 0);
  }
  uint32_t got_down, got_up;
  shift_escapes16<C>(w, base, &got_down, &got_up);
  if (base > 0 && int32_t(got_down) - 16 != down)
    return ::testing::AssertionFailure() << "shift_escapes16 down " << got_down << " - 16 for " << down << " base " << base;
  if (int32_t(got_up) - 16 != up)
    return ::testing::AssertionFailure() << "shift_escapes16 up " << got_up << " - 16 for " << up << " base " << base;
  return ::testing::AssertionSuccess();
}

// decode16 restores the group from code16's planes (16 bits each, as stored), residuals and
// the escapes' exponents, read from the chunk at an offset.
template <Codec C>
::testing::AssertionResult check_round_trip(const uint16_t* v, uint32_t base) {
  uint32_t w[8], res[4], planes[Lanes<C>::K], out[8];
  for (int i = 0; i < 8; ++i) w[i] = v[2 * i] | uint32_t(v[2 * i + 1]) << 16;
  const uint32_t esc = code16<C>(w, base, res, planes);
  for (uint32_t& p : planes) p &= 0xFFFF;
  uint8_t chunk[3 + 16] = {0xEE, 0xEE, 0xEE};
  uint32_t n = 3;
  for (int j = 0; j < 16; ++j)
    if (esc >> j & 1) chunk[n++] = static_cast<uint8_t>(elem_exponent(C, v[j]));
  uint32_t patch[4];
  if (!decode16<C>(planes, res, base, chunk, 3, patch, out))
    return ::testing::AssertionFailure() << "escape byte refused, group at " << v[0] << " base " << base;
  for (int i = 0; i < 8; ++i)
    if (out[i] != w[i])
      return ::testing::AssertionFailure() << "word " << i << ": " << out[i] << " for " << w[i] << " base " << base;
  return ::testing::AssertionSuccess();
}

template <Codec C>
void every_pattern_every_base() {
  const uint32_t max_base = geometry(C).exp_max - (kWindow - 1);
  std::vector<uint16_t> v(65536);
  std::iota(v.begin(), v.end(), 0);
  std::mt19937 g{uint32_t(C)};
  for (int order = 0; order < 2; ++order) {  // in sequence, then shuffled (other neighbours)
    if (order) std::shuffle(v.begin(), v.end(), g);
    for (uint32_t base = 0; base <= max_base; ++base)
      for (size_t i = 0; i < v.size(); i += 16) {
        ASSERT_TRUE(check_group<C>(&v[i], base));
        ASSERT_TRUE(check_round_trip<C>(&v[i], base));
      }
  }
}

TEST(Lanes, Code16Bf16EveryPatternEveryBase) { every_pattern_every_base<Codec::BF16>(); }
TEST(Lanes, Code16Fp16EveryPatternEveryBase) { every_pattern_every_base<Codec::FP16>(); }

// shift_escapes16_fp32 against exp_code() for random fp32 values around every base, and every
// exponent at the window's edges.
TEST(Lanes, ShiftEscapesFp32) {
  std::mt19937 g(17);
  for (uint32_t base = 0; base <= 255 - (kWindow - 1); ++base)
    for (int rep = 0; rep < 40; ++rep) {
      uint32_t w[16];
      for (uint32_t& x : w) {
        const uint32_t e = rep % 2 ? (base + (g() % 11) - 2) & 0xFF : g() & 0xFF;
        x = (g() & 0x807FFFFFu) | e << 23;
      }
      int32_t down = 0, up = 0;
      for (uint32_t x : w) {
        const uint32_t e = (x >> 23) & 0xFF;
        if (base > 0) down += int32_t(exp_code(e, base - 1) == 0) - int32_t(exp_code(e, base) == 0);
        up += int32_t(exp_code(e, base + 1) == 0) - int32_t(exp_code(e, base) == 0);
      }
      uint32_t d, u;
      shift_escapes16_fp32(w, base, &d, &u);
      if (base > 0) {
        ASSERT_EQ(int32_t(d) - 16, down) << "base " << base;
      }
      ASSERT_EQ(int32_t(u) - 16, up) << "base " << base;
    }
}

template <Codec C>
void stats_match() {
  std::vector<uint16_t> v(65536);
  std::iota(v.begin(), v.end(), 0);
  std::mt19937 g(7);
  std::shuffle(v.begin(), v.end(), g);
  // Extremes too: all exponents at their maximum (the largest per-lane sums), all zero.
  const uint16_t top = uint16_t(geometry(C).exp_max << (C == Codec::BF16 ? 7 : 10));
  v.insert(v.end(), 16, top);
  v.insert(v.end(), 16, 0x8000);
  for (size_t i = 0; i + 16 <= v.size(); i += 16) {
    uint32_t w[8], sum = 0, count = 0;
    for (int j = 0; j < 8; ++j) w[j] = v[i + 2 * j] | uint32_t(v[i + 2 * j + 1]) << 16;
    for (int j = 0; j < 16; ++j) {
      sum += elem_exponent(C, v[i + j]);
      count += elem_exponent(C, v[i + j]) != 0;
    }
    ASSERT_EQ(stats16<C>(w), sum | count << kCountShift) << "group at " << i;
  }
}

// An fp16 escape byte above exp_max (31) is refused; the same byte in range is taken.
TEST(Lanes, Decode16RefusesFp16EscapeAboveMax) {
  uint16_t v[16] = {};
  for (int j = 0; j < 16; ++j) v[j] = uint16_t(15 << 10 | j);  // exponent 15: inside the window at base 14
  v[5] = uint16_t(2 << 10);                                   // exponent 2: an escape
  uint32_t w[8], res[4], planes[Lanes<Codec::FP16>::K], out[8];
  for (int i = 0; i < 8; ++i) w[i] = v[2 * i] | uint32_t(v[2 * i + 1]) << 16;
  ASSERT_EQ(code16<Codec::FP16>(w, 14, res, planes), 1u << 5);
  for (uint32_t& p : planes) p &= 0xFFFF;
  const uint8_t in_range = 31, above = 32;
  uint32_t patch[4];
  EXPECT_TRUE(decode16<Codec::FP16>(planes, res, 14, &in_range, 0, patch, out));
  EXPECT_EQ(out[2] >> 16, uint32_t(31 << 10));  // element 5, its escape patched in
  EXPECT_FALSE(decode16<Codec::FP16>(planes, res, 14, &above, 0, patch, out));
}

TEST(Lanes, Stats16Bf16) { stats_match<Codec::BF16>(); }
TEST(Lanes, Stats16Fp16) { stats_match<Codec::FP16>(); }

}  // namespace
}  // namespace zipccl::lanes
