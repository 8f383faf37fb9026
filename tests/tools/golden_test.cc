// Golden outputs of the CPU codec: the encoder's bytes are the format contract (the GPU codec
// must match them), so performance work on kernels/cpu must not change a single output byte,
// nor which corrupted messages the decoder rejects and how. Inputs come from an integer-only
// generator so they are identical on every platform and standard library.
//
// After an intended format change, regenerate the table with
//   ZIPCCL_GOLDEN_PRINT=1 ./golden_tests --gtest_filter=Golden.*
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "elements.h"
#include "zipccl/codec.h"

using namespace zipccl;

namespace {

struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// Bell-shaped float with scale 2^scale_log2: a centred sum of four 22-bit uniforms is an exact
// integer, and scaling by a power of two is exact, so no libm rounding is involved.
float bell(SplitMix& r, int scale_log2) {
  int64_t s = 0;
  for (int i = 0; i < 4; ++i) s += int64_t(r.next() >> 42);
  return std::ldexp(float(s - (int64_t(1) << 23)), scale_log2 - 22);
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// float -> fp16 bits by truncation (flush to zero below the normal range, inf above).
uint16_t to_fp16(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000;
  int e = int((u >> 23) & 0xFF) - 127 + 15;
  if (e <= 0) return static_cast<uint16_t>(sign);
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  return static_cast<uint16_t>(sign | (e << 10) | ((u >> 13) & 0x3FF));
}

enum Kind { kBell, kTiny, kHuge, kSparse, kRandom, kMixed, kSteps, kZeros, kNumKinds };
const char* kKindNames[] = {"bell", "tiny", "huge", "sparse", "random", "mixed", "steps", "zeros"};

void put(std::vector<uint8_t>& v, Codec c, uint64_t i, float f) {
  const uint32_t es = geometry(c).elem_bytes;
  uint32_t bits = c == Codec::FP16 ? to_fp16(f) : c == Codec::BF16 ? float_bits(f) >> 16 : float_bits(f);
  for (uint32_t k = 0; k < es && i * es + k < v.size(); ++k) v[i * es + k] = uint8_t(bits >> (8 * k));
}

std::vector<uint8_t> make_input(Codec c, Kind kind, size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  SplitMix r{seed * 1000003u + uint64_t(kind) * 7919u + n};
  const uint32_t es = c == Codec::Raw ? 2 : geometry(c).elem_bytes;
  const Codec ec = c == Codec::Raw ? Codec::BF16 : c;
  const uint64_t elems = (n + es - 1) / es;
  for (uint64_t i = 0; i < elems; ++i) {
    const uint64_t block = i / kBlockElems;
    switch (kind) {
      case kBell: put(v, ec, i, bell(r, -6)); break;
      case kTiny: put(v, ec, i, bell(r, ec == Codec::FP16 ? -14 : -120)); break;
      case kHuge: put(v, ec, i, bell(r, ec == Codec::FP16 ? 14 : 120)); break;
      case kSparse: put(v, ec, i, r.next() % 3 == 0 ? bell(r, -3) : 0.0f); break;
      case kRandom:
        for (uint32_t k = 0; k < es && i * es + k < n; ++k) v[i * es + k] = uint8_t(r.next());
        break;
      case kMixed:
        if (block % 3 == 1)
          for (uint32_t k = 0; k < es && i * es + k < n; ++k) v[i * es + k] = uint8_t(r.next());
        else
          put(v, ec, i, bell(r, -4));
        break;
      case kSteps: put(v, ec, i, bell(r, int(block % 9) * 3 - 14)); break;
      case kZeros: break;
      default: break;
    }
  }
  return v;
}

// Deterministic corruptions of a message: byte flips anywhere, in the header and the block
// table, and truncations.
std::vector<uint8_t> mutate(const std::vector<uint8_t>& m, SplitMix& r, int which) {
  std::vector<uint8_t> x = m;
  if (x.empty()) return x;
  switch (which % 4) {
    case 0: x[r.next() % x.size()] ^= uint8_t(1u << (r.next() % 8)); break;
    case 1: x[r.next() % std::min<size_t>(x.size(), kHeaderBytes)] ^= uint8_t(r.next() | 1); break;
    case 2: x[std::min<size_t>(x.size() - 1, kHeaderBytes + r.next() % 256)] ^= uint8_t(r.next() | 1); break;
    default: x.resize(r.next() % x.size()); break;
  }
  return x;
}

struct Digest {
  uint32_t crc = 0;
  void add(const void* p, size_t n) { crc = crc32c(p, n, crc); }
  void add_u64(uint64_t v) { add(&v, sizeof v); }
};

// 1024 bytes of bf16 is the size where the coded sections fill exactly 128 + n bytes: an
// escape-free input ties with raw and must stay coded.
const size_t kSizes[] = {0, 1, 2, 3, 5, 64, 1000, 1024, 8190, 8192, 8193, 16384, 16387,
                         3 * 16384 + 6, 20 * 16384 + 3, (1u << 20) + 2};

// Digest of everything the codec produces for one (codec, kind): encoded bytes under several
// options, the decoder's status on corrupted messages, and its output when it accepts them.
uint32_t digest_case(Codec c, Kind kind) {
  Digest d;
  for (size_t n : kSizes) {
    const auto in = make_input(c, kind, n, 1);
    const EncodeOptions opts[] = {{false, 1.0}, {true, 1.0}, {false, 0.6}};
    for (const EncodeOptions& opt : opts) {
      std::vector<uint8_t> msg(max_compressed_bytes(n));
      size_t mn = 0;
      EXPECT_EQ(encode(c, in.data(), n, msg.data(), msg.size(), &mn, opt), Status::kOk);
      msg.resize(mn);
      d.add_u64(mn);
      d.add(msg.data(), mn);

      std::vector<uint8_t> out(n + 1);
      size_t on = 0;
      EXPECT_EQ(decode(msg.data(), mn, out.data(), out.size(), &on), Status::kOk);
      EXPECT_EQ(on, n);
      EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin())) << codec_name(c) << " " << kKindNames[kind] << " " << n;

      if (n > 400000) continue;  // corruptions of the smaller messages cover every section
      SplitMix r{n * 31 + mn};
      for (int m = 0; m < 24; ++m) {
        const auto bad = mutate(msg, r, m);
        std::vector<uint8_t> o(n + 1);
        size_t bn = 0;
        const Status s = decode(bad.data(), bad.size(), o.data(), o.size(), &bn);
        d.add_u64(uint64_t(s));
        if (s == Status::kOk) d.add(o.data(), bn);
      }
    }
  }
  return d.crc;
}

struct Expected {
  Codec codec;
  Kind kind;
  uint32_t crc;
};

// Captured from the scalar reference codec (kernels/cpu of commit 3494281, before any
// optimization) with the raw-tie rule of commit 51c70ce applied.
const Expected kGolden[] = {
#include "golden_expected.inc"
};

TEST(Golden, CodecOutputUnchanged) {
  const bool print = std::getenv("ZIPCCL_GOLDEN_PRINT") != nullptr;
  for (Codec c : {Codec::Raw, Codec::BF16, Codec::FP16, Codec::FP32}) {
    for (int k = 0; k < kNumKinds; ++k) {
      const uint32_t got = digest_case(c, Kind(k));
      if (print) {
        std::printf("{Codec::%s, %s, 0x%08Xu},\n",
                    c == Codec::Raw ? "Raw" : c == Codec::BF16 ? "BF16" : c == Codec::FP16 ? "FP16" : "FP32",
                    std::string("k" + std::string(1, char(std::toupper(kKindNames[k][0]))) + (kKindNames[k] + 1)).c_str(),
                    got);
        continue;
      }
      bool found = false;
      for (const Expected& e : kGolden)
        if (e.codec == c && e.kind == k) {
          found = true;
          EXPECT_EQ(got, e.crc) << codec_name(c) << " / " << kKindNames[k];
        }
      EXPECT_TRUE(found) << codec_name(c) << " / " << kKindNames[k];
    }
  }
}

// The encoder's byte-lane helpers against format.h, exhaustively.
TEST(Golden, ByteHelpersMatchFormat) {
  for (uint32_t base = 0; base <= 255 - (kWindow - 1); ++base)
    for (uint32_t e = 0; e < 256; ++e)
      ASSERT_EQ(cpu::exp_code8(uint8_t(e), uint8_t(base)), exp_code(e, base)) << e << " " << base;
  for (uint32_t b = 0; b < 256; ++b) {
    uint64_t want = 0;
    for (int t = 0; t < 8; ++t) want |= uint64_t((b >> t) & 1) << (8 * t);
    ASSERT_EQ(cpu::spread_bits(uint8_t(b)), want);
    ASSERT_EQ(cpu::kSpread.v[b], want);
    ASSERT_EQ(cpu::pack_bits(want), b);
  }
  // pack_planes (16 symbols at a time where SIMD is available, then a group tail) against the
  // definition, for 6-bit symbols and odd and even group counts.
  SplitMix r{5};
  for (uint32_t groups : {1u, 2u, 7u, 64u, 511u, 512u}) {
    std::vector<uint8_t> syms(groups * 8);
    for (auto& s : syms) s = uint8_t(r.next() & 63);
    const uint64_t stride = 600;
    std::vector<uint8_t> planes(6 * stride, 0xEE);
    cpu::pack_planes(syms.data(), groups, 6, planes.data(), stride);
    for (uint32_t k = 0; k < 6; ++k)
      for (uint32_t gi = 0; gi < groups; ++gi) {
        uint8_t want = 0;
        for (uint32_t t = 0; t < 8; ++t) want |= uint8_t(((syms[gi * 8 + t] >> k) & 1) << t);
        ASSERT_EQ(planes[k * stride + gi], want) << groups << " " << k << " " << gi;
      }
  }
}

}  // namespace
