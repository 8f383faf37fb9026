// zipccl-inspect's readers and analysis: parsers on valid, malformed, truncated and hostile
// inputs; the analysis on synthetic tensors with known answers; real data when present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "analysis.h"
#include "fp16.h"
#include "synth.h"
#include "tensor_file.h"
#include "zipccl/codec.h"

using namespace zipccl;
using namespace zipccl::tools;

namespace {

std::vector<uint8_t> safetensors(const std::string& json, size_t data_bytes, uint64_t hlen_override = 0) {
  std::vector<uint8_t> f(8);
  const uint64_t hlen = hlen_override ? hlen_override : json.size();
  for (int i = 0; i < 8; ++i) f[i] = uint8_t(hlen >> (8 * i));
  f.insert(f.end(), json.begin(), json.end());
  for (size_t i = 0; i < data_bytes; ++i) f.push_back(uint8_t(i * 7));
  return f;
}

bool st_ok(const std::vector<uint8_t>& f, std::vector<TensorInfo>* t = nullptr, std::string* err = nullptr) {
  std::vector<TensorInfo> tmp;
  std::string e;
  const bool ok = parse_safetensors(f.data(), f.size(), t ? t : &tmp, err ? err : &e);
  if (!ok) {
    EXPECT_FALSE((err ? *err : e).empty());
  }
  return ok;
}

const char* kTwoTensors =
    R"({"__metadata__":{"k":"v"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
    R"( "b\"q\u00e9" : { "dtype" : "F32", "shape" : [ 2 ], "data_offsets" : [ 12 , 20 ] } })";

TEST(Safetensors, ParsesTensors) {
  std::vector<TensorInfo> t;
  ASSERT_TRUE(st_ok(safetensors(kTwoTensors, 20), &t));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "a");
  EXPECT_EQ(t[0].codec, Codec::BF16);
  EXPECT_EQ(t[0].shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(t[0].offset, 8 + std::strlen(kTwoTensors));
  EXPECT_EQ(t[0].bytes, 12u);
  EXPECT_EQ(t[1].name, "b\"q\\u00e9");
  EXPECT_EQ(t[1].codec, Codec::FP32);
  EXPECT_EQ(t[1].offset, t[0].offset + 12);
  EXPECT_EQ(t[1].bytes, 8u);
}

TEST(Safetensors, OtherDtypesAndScalars) {
  std::vector<TensorInfo> t;
  ASSERT_TRUE(st_ok(safetensors(R"({"i":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                                R"("e":{"dtype":"F16","shape":[0],"data_offsets":[8,8]}})", 8), &t));
  EXPECT_EQ(t[0].codec, Codec::Raw);
  EXPECT_EQ(t[1].codec, Codec::FP16);
  EXPECT_EQ(t[1].bytes, 0u);
}

TEST(Safetensors, RejectsMalformed) {
  const char* bad[] = {
      "", "[]", "{", R"({"a":1})", "{\"a\":{}}", R"({"a":{"dtype":"BF16","shape":[2]}})",
      R"({"a":{"dtype":"XX","shape":[2],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"BF16","shape":[-2],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"BF16","shape":[2.5],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4,8]}})",
      R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[4,0]}})",
      R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})",    // dtype x shape != span
      R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}} x)",  // trailing bytes
      R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},})",   // trailing comma
      R"({"a":{"dtype":"BF16\u0000","shape":[2],"data_offsets":[0,4]}})",
      "{\"a\":\"\x01\"}", R"({"a":"\q"})", R"({"a":tru})", R"({"a":"unterminated)",
  };
  for (const char* j : bad) EXPECT_FALSE(st_ok(safetensors(j, 4))) << j;
}

TEST(Safetensors, RejectsHugeOffsetsAndShapes) {
  EXPECT_FALSE(st_ok(safetensors(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,18446744073709551615]}})", 4)));
  EXPECT_FALSE(st_ok(safetensors(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,99999999999999999999999]}})", 4)));
  EXPECT_FALSE(st_ok(safetensors(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[18446744073709551612,18446744073709551616]}})", 4)));
  // Shape product overflows 64 bits but wraps to the span: must still be rejected.
  EXPECT_FALSE(st_ok(safetensors(R"({"a":{"dtype":"BF16","shape":[4294967296,4294967296,2],"data_offsets":[0,4]}})", 4)));
  EXPECT_FALSE(st_ok(safetensors(R"({"a":{"dtype":"BF16","shape":[9223372036854775810],"data_offsets":[0,4]}})", 4)));
  // Header length beyond the file, and absurdly large.
  EXPECT_FALSE(st_ok(safetensors("{}", 0, 3)));
  EXPECT_FALSE(st_ok(safetensors("{}", 0, ~uint64_t(0))));
  EXPECT_FALSE(st_ok(safetensors("{}", 0, uint64_t(1) << 40)));
}

TEST(Safetensors, RejectsDeepNesting) {
  std::string deep = R"({"__metadata__":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(st_ok(safetensors(deep, 0)));
}

TEST(Safetensors, EveryTruncationIsRejected) {
  const auto full = safetensors(kTwoTensors, 20);
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    EXPECT_FALSE(st_ok(cut)) << n;
  }
}

// Byte flips, and bytes replaced by characters that matter to the grammar, over a valid file:
// each variant must parse or be rejected, never crash (run under ASan in the sanitizer build).
template <typename Parse>
void mutate_and_parse(const std::vector<uint8_t>& valid, Parse parse) {
  const char kGrammar[] = "{}[]\",:0123456789-.eE \\'()TrueFals";
  uint32_t x = 12345;
  auto rnd = [&] { return (x = x * 1664525u + 1013904223u) >> 8; };
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> f = valid;
    for (uint32_t m = 0, n = 1 + rnd() % 4; m < n; ++m) {
      const size_t at = rnd() % f.size();
      f[at] = rnd() % 2 ? uint8_t(rnd()) : uint8_t(kGrammar[rnd() % (sizeof kGrammar - 1)]);
    }
    if (rnd() % 8 == 0) f.resize(rnd() % f.size());
    parse(f);
  }
}

TEST(Safetensors, MutationsNeverCrash) {
  mutate_and_parse(safetensors(kTwoTensors, 20), [](const std::vector<uint8_t>& f) {
    std::vector<TensorInfo> t;
    std::string err;
    if (!parse_safetensors(f.data(), f.size(), &t, &err)) return;
    for (const TensorInfo& ti : t) EXPECT_LE(ti.offset + ti.bytes, f.size());
  });
}

std::vector<uint8_t> npy(int major, const std::string& dict, size_t data_bytes) {
  std::vector<uint8_t> f = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(major), 0};
  const size_t len_bytes = major == 1 ? 2 : 4;
  std::string h = dict;
  while ((f.size() + len_bytes + h.size() + 1) % 64) h += ' ';
  h += '\n';
  for (size_t i = 0; i < len_bytes; ++i) f.push_back(uint8_t(h.size() >> (8 * i)));
  f.insert(f.end(), h.begin(), h.end());
  f.resize(f.size() + data_bytes, 0x3C);
  return f;
}

bool npy_ok(const std::vector<uint8_t>& f, DTypeHint hint = DTypeHint::None, TensorInfo* t = nullptr) {
  TensorInfo tmp;
  std::string err;
  const bool ok = parse_npy(f.data(), f.size(), hint, t ? t : &tmp, &err);
  if (!ok) {
    EXPECT_FALSE(err.empty());
  }
  return ok;
}

TEST(Npy, ParsesVersions) {
  for (int v = 1; v <= 3; ++v) {
    TensorInfo t;
    const auto f = npy(v, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    ASSERT_TRUE(npy_ok(f, DTypeHint::None, &t)) << v;
    EXPECT_EQ(t.codec, Codec::FP32);
    EXPECT_EQ(t.shape, (std::vector<uint64_t>{2, 3}));
    EXPECT_EQ(t.bytes, 24u);
    EXPECT_EQ(t.offset + t.bytes, f.size());
    EXPECT_EQ(t.offset % 64, 0u);
  }
}

TEST(Npy, Dtypes) {
  TensorInfo t;
  ASSERT_TRUE(npy_ok(npy(1, "{'descr': '<f2', 'fortran_order': True, 'shape': (4,), }", 8), DTypeHint::None, &t));
  EXPECT_EQ(t.codec, Codec::FP16);
  ASSERT_TRUE(npy_ok(npy(1, "{'descr': '|V2', 'fortran_order': False, 'shape': (4,), }", 8), DTypeHint::None, &t));
  EXPECT_EQ(t.codec, Codec::BF16);
  ASSERT_TRUE(npy_ok(npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", 8), DTypeHint::None, &t));
  EXPECT_EQ(t.codec, Codec::Raw);
  ASSERT_TRUE(npy_ok(npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", 8), DTypeHint::BF16, &t));
  EXPECT_EQ(t.codec, Codec::BF16);
  // A hint of the wrong width, or big-endian data, is not reinterpreted.
  ASSERT_TRUE(npy_ok(npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", 8), DTypeHint::FP32, &t));
  EXPECT_EQ(t.codec, Codec::Raw);
  ASSERT_TRUE(npy_ok(npy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8), DTypeHint::None, &t));
  EXPECT_EQ(t.codec, Codec::Raw);
  ASSERT_TRUE(npy_ok(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4), DTypeHint::None, &t));
  EXPECT_EQ(t.bytes, 4u);
}

TEST(Npy, RejectsMalformed) {
  const char* bad[] = {
      "{'descr': '<f4', 'shape': (2,), }",                                       // missing key
      "{'descr': '<f4', 'fortran_order': maybe, 'shape': (2,), }",
      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",      // structured
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
      "{'descr': '<x4', 'fortran_order': False, 'shape': (2,), }",
      "{'descr': '<f', 'fortran_order': False, 'shape': (2,), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
      "not a dict",
  };
  for (const char* d : bad) EXPECT_FALSE(npy_ok(npy(1, d, 8))) << d;
  auto f = npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
  f[1] = 'X';
  EXPECT_FALSE(npy_ok(f));
  f[1] = 'N';
  f[6] = 4;
  EXPECT_FALSE(npy_ok(f));
}

TEST(Npy, EveryTruncationIsRejected) {
  const auto full = npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    EXPECT_FALSE(npy_ok(cut)) << n;
  }
}

TEST(Npy, MutationsNeverCrash) {
  mutate_and_parse(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24),
                   [](const std::vector<uint8_t>& f) {
                     TensorInfo t;
                     std::string err;
                     if (!parse_npy(f.data(), f.size(), DTypeHint::None, &t, &err)) return;
                     EXPECT_LE(t.offset + t.bytes, f.size());
                   });
}

TEST(TensorFile, MissingFileIsAnError) {
  TensorFile tf;
  std::string err;
  EXPECT_FALSE(load_tensor_file("/nonexistent/x.safetensors", DTypeHint::None, &tf, &err));
  EXPECT_NE(err.find("cannot open"), std::string::npos);
}

// ---- Analysis ----

TEST(Analysis, WindowHelpersOnAHandMadeBlock) {
  BlockHist b;
  b.n = 100;
  b.h[0] = 10;   // zeros
  b.h[120] = 5;
  for (uint32_t e = 121; e <= 127; ++e) b.h[e] = 12;  // 84 in [121, 127]
  b.h[130] = 1;
  EXPECT_EQ(block_escapes(b, 121), 16u);
  EXPECT_EQ(block_escapes(b, 120), 10u + 12 + 1);
  EXPECT_EQ(best_base(Codec::BF16, b), 121u);
  // All-zero blocks keep base 0 (window [0, 6]), as the codec does.
  BlockHist z;
  z.n = 64;
  z.h[0] = 64;
  EXPECT_EQ(codec_base(Codec::BF16, z), 0u);
  EXPECT_EQ(rms_base(Codec::BF16, z), 0u);
  EXPECT_EQ(best_base(Codec::BF16, z), 0u);
}

TEST(Analysis, GaussianBf16) {
  const auto v = synth(Codec::BF16, Dist::Gaussian, 0.02, 1 << 20, 7);
  const TensorAnalysis a = analyze(Codec::BF16, v.data(), v.size());
  EXPECT_TRUE(a.model_agrees);
  EXPECT_TRUE(a.exact);
  EXPECT_EQ(a.classified, Codec::BF16);
  EXPECT_EQ(a.elems, 1u << 20);
  EXPECT_EQ(a.blocks, 256u);
  EXPECT_EQ(a.raw_blocks, 0u);
  EXPECT_GT(a.ratio(), 0.69);
  EXPECT_LT(a.ratio(), 0.705);
  EXPECT_LE(a.best_bytes, a.encoded_bytes);
  // The 7-exponent window of a Gaussian leaves about 2.5% outside.
  EXPECT_GT(a.escape_rate(), 0.015);
  EXPECT_LT(a.escape_rate(), 0.035);
  EXPECT_GE(a.bits_lost(), 0.0);
  EXPECT_LT(a.bits_lost(), 0.05);

  const auto blocks = block_histograms(Codec::BF16, v.data(), v.size());
  // sigma = 0.02: log2 = -5.64, so the spec's rule gives 122 + floor(-5.36) = 116.
  for (const BlockHist& b : blocks) {
    EXPECT_EQ(rms_base(Codec::BF16, b), 116u);
    EXPECT_NEAR(double(codec_base(Codec::BF16, b)), 116.0, 1.0);
  }
  const auto best = rule_bases(Codec::BF16, blocks, WindowRule::Best);
  const auto fixed = rule_bases(Codec::BF16, blocks, WindowRule::BestFixed);
  const auto codec = rule_bases(Codec::BF16, blocks, WindowRule::Codec);
  const uint64_t best_bytes = message_bytes(Codec::BF16, v.size(), blocks, best);
  EXPECT_EQ(best_bytes, a.best_bytes);
  EXPECT_LE(best_bytes, message_bytes(Codec::BF16, v.size(), blocks, fixed));
  EXPECT_EQ(message_bytes(Codec::BF16, v.size(), blocks, codec), a.encoded_bytes);
  const WindowAccuracy w = window_accuracy(Codec::BF16, blocks, best);
  EXPECT_EQ(w.optimal, w.blocks);
  EXPECT_EQ(w.exact, w.blocks);
  EXPECT_EQ(w.extra_bytes, 0);
}

// The size model must reproduce the encoder exactly: raw blocks, raw fallback, every codec,
// partial blocks and tails.
TEST(Analysis, SizeModelMatchesEncoder) {
  for (Codec c : {Codec::BF16, Codec::FP16, Codec::FP32}) {
    const uint32_t es = geometry(c).elem_bytes;
    for (double scale : {1e-30, 1e-6, 0.02, 3.0, 1e4}) {
      for (size_t elems : {size_t(1), size_t(100), size_t(4096), size_t(4097), size_t(50000)}) {
        auto v = synth(c, Dist::StudentT3, scale, elems, elems);
        v.push_back(0x5A);  // a tail byte
        const TensorAnalysis a = analyze(c, v.data(), v.size());
        EXPECT_TRUE(a.model_agrees) << codec_name(c) << " " << scale << " " << elems;
        EXPECT_TRUE(a.exact) << codec_name(c) << " " << scale << " " << elems;
      }
    }
    // Random bytes: raw blocks, and the whole message falls back to raw.
    std::vector<uint8_t> r(100000 * es);
    uint32_t x = 1;
    for (auto& b : r) b = uint8_t((x = x * 1664525u + 1013904223u) >> 24);
    const TensorAnalysis a = analyze(c, r.data(), r.size());
    EXPECT_TRUE(a.model_agrees) << codec_name(c);
    EXPECT_TRUE(a.exact) << codec_name(c);
    EXPECT_LE(a.encoded_bytes, r.size() + kHeaderBytes);
    // Gaussian blocks interleaved with random ones: coded message with raw blocks.
    auto g = synth(c, Dist::Gaussian, 1.0, 8 * kBlockElems, 3);
    std::copy(r.begin(), r.begin() + kBlockElems * es, g.begin() + 2 * kBlockElems * es);
    const TensorAnalysis m = analyze(c, g.data(), g.size());
    EXPECT_TRUE(m.model_agrees) << codec_name(c);
    EXPECT_TRUE(m.exact) << codec_name(c);
    EXPECT_EQ(m.raw_blocks, 1u) << codec_name(c);
    EXPECT_LT(m.ratio(), 1.0) << codec_name(c);
  }
}

// Real tensors (ZIPCCL_DATA_DIR): the analysis runs on every tensor, its size model agrees with
// the encoder, and each file meets its ratio target as whole-tensor messages.
TEST(Analysis, RealData) {
  const char* dir = std::getenv("ZIPCCL_DATA_DIR");
  struct File {
    const char* name;
    double target;
  } files[] = {{"weights_bf16", 0.705}, {"grads_bf16", 0.73}, {"acts_bf16", 0.71}, {"grads_fp32", 0.87}};
  TensorFile probe;
  std::string err;
  if (!dir || !load_tensor_file(std::string(dir) + "/weights_bf16.safetensors", DTypeHint::None, &probe, &err))
    GTEST_SKIP() << "no training tensors (ZIPCCL_DATA_DIR)";
  for (const File& f : files) {
    TensorFile tf;
    ASSERT_TRUE(load_tensor_file(std::string(dir) + "/" + f.name + ".safetensors", DTypeHint::None, &tf, &err)) << err;
    TensorAnalysis total;
    for (const TensorInfo& t : tf.tensors) {
      const TensorAnalysis a = analyze(t.codec, tf.data.data() + t.offset, t.bytes);
      EXPECT_TRUE(a.model_agrees) << f.name << " " << t.name;
      EXPECT_TRUE(a.exact) << f.name << " " << t.name;
      total.add(a);
    }
    EXPECT_LE(total.ratio(), f.target) << f.name;
    EXPECT_GT(total.window_match(), 0.5) << f.name;
  }
}

}  // namespace

// The half-precision helpers replace _Float16 (which clang 14 lacks on x86): every half survives
// half -> double -> float -> half, and ties round to even.
TEST(Fp16, EveryPatternRoundTripsAndTiesRoundToEven) {
  using zipccl::tools::float_to_fp16;
  using zipccl::tools::fp16_to_double;
  for (uint32_t h = 0; h < 65536; ++h) {
    const double d = fp16_to_double(uint16_t(h));
    if (std::isnan(d)) {
      EXPECT_EQ(float_to_fp16(float(d)) & 0x7C00, 0x7C00) << h;
      continue;
    }
    EXPECT_EQ(float_to_fp16(float(d)), h) << h;
  }
  EXPECT_EQ(fp16_to_double(0x3C00), 1.0);
  EXPECT_EQ(fp16_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);          // tie -> even (down)
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);      // tie -> even (up)
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);                 // tie below the smallest subnormal
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_fp16(-1e-10f), 0x8000);
}
