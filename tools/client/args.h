// Command-line values of the tools: whole decimal numbers within bounds (no sign, no trailing
// characters), so that a typo is refused instead of read as 0 or as part of a number.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace zipccl::client {

inline bool parse_uint(const char* s, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (!s || *s < '0' || *s > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace zipccl::client
