// copy_lines_in_order: the bytes, and the order in which a reader polling the buffer (NCCL's LL and
// LL128 receivers) sees them land, wherever a copy ends and recv() brings the rest.
#include "line_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "sanitizers.h"

namespace zipccl::tcp {
namespace {

// What recv() does with the rest: one byte after another.
void rest_in_order(char* dst, const char* src, size_t from, size_t to) {
  volatile char* out = dst;
  for (size_t i = from; i < to; ++i) out[i] = src[i];
}

TEST(LineCopy, EveryLengthCopiesItsBytesAndNoMore) {
  std::vector<char> src(3 * kLine), dst(src.size() + 16);
  for (size_t i = 0; i < src.size(); ++i) src[i] = char(i * 37 + 11);
  for (size_t n = 0; n <= src.size(); ++n) {
    std::fill(dst.begin(), dst.end(), char(0x5A));
    copy_lines_in_order(dst.data(), src.data(), n);
    ASSERT_TRUE(std::equal(src.begin(), src.begin() + long(n), dst.begin())) << n;
    for (size_t i = n; i < dst.size(); ++i) ASSERT_EQ(dst[i], char(0x5A)) << n << " wrote byte " << i;
  }
}

// A writer copies line after line, each iteration's bytes all its number (1..255, wrapping), cut at
// `cut` with recv()'s rest after it; a reader spins on the line. Wherever a flag is all one
// iteration's (an LL word's last 4 bytes, an LL128 line's last 8), no byte before it may be an
// earlier iteration's: a flag never lands before its data. An LL word is read at once; an LL128
// line word by word, kept only if the writer went on by one iteration at most meanwhile (its
// bytes are then of three iterations in a row, which their numbers tell apart).
TEST(LineCopy, AReaderNeverSeesAFlagBeforeItsData) {
  if (ZIP_TEST_TSAN)
    GTEST_SKIP() << "the reader races the writer on purpose: ThreadSanitizer reports what this test measures";
  alignas(kLine) static char line[kLine];
  alignas(kLine) static char src[kLine];
  std::atomic<long> iteration{0};
  std::atomic<bool> stop{false};
  std::atomic<long> flags_seen{0}, early{0};
  auto word = [](int w) { return __atomic_load_n(reinterpret_cast<const uint64_t*>(line + 8 * w), __ATOMIC_ACQUIRE); };
  auto byte = [](uint64_t v, int b) { return uint32_t(v >> (8 * b) & 0xFF); };
  // Bytes [from, to) of v all alike and written (not 0): *f their iteration's number.
  auto whole = [&](uint64_t v, int from, int to, uint32_t* f) {
    *f = byte(v, from);
    for (int b = from + 1; b < to; ++b)
      if (byte(v, b) != *f) return false;
    return *f != 0;
  };
  // Bytes [0, to) of v written after iteration f's: of the one or two before it.
  auto older = [&](uint64_t v, int to, uint32_t f) {
    for (int b = 0; b < to; ++b)
      if (byte(v, b) == (f + 253) % 255 + 1 || byte(v, b) == (f + 252) % 255 + 1) return true;
    return false;
  };
  std::thread reader([&] {
    uint64_t v[kLine / 8];
    while (!stop.load(std::memory_order_relaxed)) {
      for (int w = 0; w < int(kLine / 8); ++w) {  // LL: each word's flag and data, read at once
        uint32_t f = 0;
        v[w] = word(w);
        if (whole(v[w], 4, 8, &f) && older(v[w], 4, f)) ++early;
      }
      const long before = iteration.load(std::memory_order_acquire);
      const uint64_t flag = word(kLine / 8 - 1);  // LL128: the line's flag, then the line
      for (int w = 0; w < int(kLine / 8) - 1; ++w) v[w] = word(w);
      uint32_t f = 0;
      if (iteration.load(std::memory_order_acquire) - before > 1 || !whole(flag, 0, 8, &f)) continue;
      ++flags_seen;
      for (int w = 0; w < int(kLine / 8) - 1; ++w) early += older(v[w], 8, f);
    }
  });
  for (size_t cut = 1; cut < kLine; cut += cut % 4 == 0 ? 1 : 3)  // 1, 4, 5, 8, 9, ...: in and between words
    for (int k = 0; k < 20000; ++k) {
      const long i = iteration.load(std::memory_order_relaxed) + 1;
      iteration.store(i, std::memory_order_release);
      std::memset(src, int(i % 255 + 1), kLine);
      copy_lines_in_order(line, src, cut);
      std::atomic_thread_fence(std::memory_order_release);
      rest_in_order(line, src, cut, kLine);
    }
  stop = true;
  reader.join();
  EXPECT_EQ(early.load(), 0) << "of " << flags_seen.load() << " whole line flags seen";
  EXPECT_GT(flags_seen.load(), 0);
}

}  // namespace
}  // namespace zipccl::tcp
