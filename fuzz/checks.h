// Checks shared by the fuzz targets: a failed promise aborts (libFuzzer then saves the input), and
// output buffers carry a guard region that must come back untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace fuzz {

constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;

inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz check failed: %s\n", what);
    std::abort();
  }
}

inline bool guard_intact(const std::vector<uint8_t>& b, size_t from) {
  for (size_t i = from; i < b.size(); ++i)
    if (b[i] != kGuardByte) return false;
  return true;
}

}  // namespace fuzz
