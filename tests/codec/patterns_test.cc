// Every bit pattern of bf16 and fp16, and the special fp32 values, through each path an element
// can take: an in-window code, an escape, and a raw block. Values are embedded among filler
// chosen to force each path; the path actually taken is read back from the message, so the
// coverage is checked rather than assumed.
#include <algorithm>
#include <cstdio>
#include <map>

#include "test_util.h"

namespace zipccl::test {
namespace {

enum class Path { kCoded, kEscaped, kRaw };

struct Coverage {
  explicit Coverage(size_t n) : coded(n), escaped(n), raw(n) {}
  std::vector<uint8_t> coded, escaped, raw;
};

// An element of codec c with exponent e and random sign/mantissa bits.
uint32_t with_exponent(Codec c, uint32_t e, std::mt19937& g) {
  const uint8_t res[3] = {uint8_t(g()), uint8_t(g()), uint8_t(g())};
  return elem_join(c, e, res, g() & 7);
}

// Round-trips `values` embedded in blocks that force `path` and records the path each value took.
::testing::AssertionResult exercise(Codec c, const std::vector<uint32_t>& values, Path path, Coverage* cov) {
  const CodecGeometry geo = geometry(c);
  const uint32_t n_exp = geo.exp_max + 1;
  // Few values per block where they must escape: they pull the window mean by at most
  // (n_exp/2) * 64/4096 <= 2 exponents, so the filler stays inside the window.
  const uint32_t per_block = path == Path::kEscaped ? 64 : 512;
  const uint32_t spacing = kBlockElems / per_block;
  std::mt19937 g(uint32_t(c) * 3 + uint32_t(path));

  // Chunks of value indices; each chunk becomes one block. Coded/escaped chunks share one exponent.
  std::vector<std::vector<size_t>> chunks;
  std::map<uint32_t, std::vector<size_t>> by_exp;
  for (size_t i = 0; i < values.size(); ++i) by_exp[path == Path::kRaw ? 0 : elem_exponent(c, values[i])].push_back(i);
  for (auto& [e, idx] : by_exp)
    for (size_t s = 0; s < idx.size(); s += per_block)
      chunks.emplace_back(idx.begin() + s, idx.begin() + std::min(idx.size(), s + per_block));

  std::vector<uint32_t> elems;
  std::vector<std::pair<size_t, size_t>> placed;  // (value index, element index)
  for (const auto& chunk : chunks) {
    const uint32_t e = elem_exponent(c, values[chunk[0]]);
    uint32_t filler_exp = 0;
    if (path == Path::kCoded) filler_exp = std::max(e, 1u);  // exponent 0 does not count in the mean
    if (path == Path::kEscaped) filler_exp = std::max((e + n_exp / 2) % n_exp, 1u);
    const size_t start = elems.size();
    for (uint32_t i = 0; i < kBlockElems; ++i)
      elems.push_back(path == Path::kRaw ? uint32_t(g()) & ((1ull << (8 * geo.elem_bytes)) - 1)
                                         : with_exponent(c, filler_exp, g));
    for (size_t j = 0; j < chunk.size(); ++j) {
      elems[start + j * spacing] = values[chunk[j]];
      placed.emplace_back(chunk[j], start + j * spacing);
    }
    // A message of raw blocks only would fall back to a raw message; a well-coded block after
    // each one pays for the table and padding.
    if (path == Path::kRaw)
      for (uint32_t i = 0; i < kBlockElems; ++i) elems.push_back(with_exponent(c, 100 % n_exp, g));
  }

  Bytes buf(elems.size() * geo.elem_bytes);
  for (size_t i = 0; i < elems.size(); ++i) put_elem(buf.data(), geo.elem_bytes, i, elems[i]);
  Bytes msg;
  auto r = round_trip(c, buf, &msg);
  if (!r) return r;
  Message m;
  r = parse_message(msg.data(), msg.size(), &m);
  if (!r) return r;
  if (m.L.codec != c) return ::testing::AssertionFailure() << "fell back to a raw message";
  for (auto [vi, pos] : placed) {
    const BlockEntry& e = m.table[pos / kBlockElems];
    if (e.mode == kBlockRaw)
      cov->raw[vi] = 1;
    else if (exp_code(elem_exponent(c, values[vi]), e.base))
      cov->coded[vi] = 1;
    else
      cov->escaped[vi] = 1;
  }
  return ::testing::AssertionSuccess();
}

// Names the first value that missed a path.
::testing::AssertionResult all_covered(const std::vector<uint32_t>& values, const std::vector<uint8_t>& seen,
                                       const char* path) {
  size_t missing = std::count(seen.begin(), seen.end(), 0);
  if (!missing) return ::testing::AssertionSuccess();
  size_t first = std::find(seen.begin(), seen.end(), 0) - seen.begin();
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%X", values[first]);
  return ::testing::AssertionFailure() << missing << " values never took the " << path << " path, e.g. " << hex;
}

void check_all_paths(Codec c, const std::vector<uint32_t>& values) {
  Coverage cov(values.size());
  for (Path p : {Path::kCoded, Path::kEscaped, Path::kRaw}) ASSERT_TRUE(exercise(c, values, p, &cov)) << int(p);
  EXPECT_TRUE(all_covered(values, cov.coded, "coded"));
  EXPECT_TRUE(all_covered(values, cov.escaped, "escaped"));
  EXPECT_TRUE(all_covered(values, cov.raw, "raw-block"));
}

TEST(BitPatterns, AllBf16) {
  std::vector<uint32_t> v(65536);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = i;
  check_all_paths(Codec::BF16, v);
}

TEST(BitPatterns, AllFp16) {
  std::vector<uint32_t> v(65536);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = i;
  check_all_paths(Codec::FP16, v);
}

// The whole 16-bit space in plain order, as one message: consecutive patterns share exponents,
// so this is the layout a real sweep over values produces.
TEST(BitPatterns, SequentialSweeps) {
  for (Codec c : {Codec::BF16, Codec::FP16, Codec::Raw}) {
    Bytes b(65536 * 2);
    for (uint32_t i = 0; i < 65536; ++i) put_elem(b.data(), 2, i, i);
    EXPECT_TRUE(round_trip(c, b)) << codec_name(c);
  }
}

TEST(BitPatterns, Fp32Specials) {
  std::vector<uint32_t> v = {
      0x00000000, 0x80000000,              // +-0
      0x00000001, 0x80000001,              // smallest denormals
      0x007FFFFF, 0x807FFFFF,              // largest denormals
      0x00800000, 0x80800000,              // smallest normals
      0x7F7FFFFF, 0xFF7FFFFF,              // +-max
      0x7F800000, 0xFF800000,              // +-inf
      0x7FC00000, 0xFFC00000,              // quiet NaNs
      0x7FC12345, 0xFFFFFFFF, 0x7FFFFFFF,  // quiet NaNs with payloads
      0x7F800001, 0xFF800001, 0x7FBFFFFF,  // signalling NaNs
      0x3F800000, 0xBF800000, 0x3F800001,  // +-1, 1 + ulp
  };
  // Every exponent with the extreme mantissas and both signs.
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t mant : {0x000000u, 0x000001u, 0x7FFFFFu, 0x400000u})
      for (uint32_t sign : {0u, 0x80000000u}) v.push_back(sign | (e << 23) | mant);
  check_all_paths(Codec::FP32, v);
}

}  // namespace
}  // namespace zipccl::test
