// Deterministic test traffic: both peers derive every message's size and bytes from (seed,
// message index, sub-receive), so the receiver checks each byte without any side channel.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace zipccl::client {

// kShift: random bytes for the first kShiftAt messages, bf16 after (data that becomes compressible).
enum class Kind { kBf16, kFp32, kRandom, kLL, kMix, kShift };
constexpr uint64_t kShiftAt = 512;

// The kind named s (bf16, fp32, random, ll, mix, shift); false for any other name.
inline bool parse_kind(const std::string& s, Kind* k) {
  static const struct {
    const char* name;
    Kind kind;
  } kKinds[] = {{"bf16", Kind::kBf16}, {"fp32", Kind::kFp32}, {"random", Kind::kRandom}, {"ll", Kind::kLL},
                {"mix", Kind::kMix}, {"shift", Kind::kShift}};
  for (const auto& e : kKinds)
    if (s == e.name) {
      *k = e.kind;
      return true;
    }
  return false;
}

inline uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t msg_key(uint64_t seed, uint64_t msg, uint32_t sub) {
  uint64_t x = seed * 0x100000001B3ull ^ (msg << 8) ^ sub;
  return splitmix(x);
}

// Sizes: mostly spread over [0, max], with 0, 1 and tiny sizes on purpose.
inline size_t msg_size(uint64_t seed, uint64_t msg, uint32_t sub, size_t max) {
  uint64_t x = msg_key(seed, msg, sub) ^ 0x5151;
  const uint64_t r = splitmix(x);
  switch (r % 16) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 1 + splitmix(x) % 64;
    case 3: return max;
    default: return splitmix(x) % (max + 1);
  }
}

inline Kind msg_kind(Kind k, uint64_t seed, uint64_t msg, uint32_t sub) {
  if (k == Kind::kShift) return msg < kShiftAt ? Kind::kRandom : Kind::kBf16;
  if (k != Kind::kMix) return k;
  uint64_t x = msg_key(seed, msg, sub) ^ 0xABCD;
  return static_cast<Kind>(splitmix(x) % 3);  // bf16, fp32, random
}

inline double gauss(uint64_t& x) {
  const double u1 = (double(splitmix(x) >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = double(splitmix(x) >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

inline void fill(Kind kind, uint64_t seed, uint64_t msg, uint32_t sub, char* p, size_t n) {
  uint64_t x = msg_key(seed, msg, sub);
  const double sigma = std::ldexp(1.0, int(splitmix(x) % 20) - 14);
  size_t i = 0;
  switch (msg_kind(kind, seed, msg, sub)) {
    case Kind::kBf16:
      for (; i + 2 <= n; i += 2) {
        float f = float(gauss(x) * sigma);
        uint32_t b;
        std::memcpy(&b, &f, 4);
        uint16_t h = uint16_t(b >> 16);
        std::memcpy(p + i, &h, 2);
      }
      break;
    case Kind::kFp32:
      for (; i + 4 <= n; i += 4) {
        float f = float(gauss(x) * sigma);
        std::memcpy(p + i, &f, 4);
      }
      break;
    case Kind::kLL:  // NCCL LL lines: 4 data bytes, a 4-byte flag, twice per 16 bytes
      for (; i + 8 <= n; i += 8) {
        uint32_t d = uint32_t(splitmix(x)), flag = uint32_t(msg + 1);
        std::memcpy(p + i, &d, 4);
        std::memcpy(p + i + 4, &flag, 4);
      }
      break;
    default:
      break;
  }
  for (; i < n; ++i) p[i] = char(splitmix(x));
}

}  // namespace zipccl::client
