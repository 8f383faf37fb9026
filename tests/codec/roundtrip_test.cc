// Round trips of synthetic data: sizes across block boundaries, tails, misaligned buffers,
// incompressible, all-escape, zero and mixed data, wrong type guesses, options, classify().
#include "test_util.h"

namespace zipccl::test {
namespace {

// Gaussian data of the codec's own type (bf16 bytes for Raw).
Bytes typed_gaussian(Codec c, size_t n, uint32_t seed) {
  return gaussian(c == Codec::Raw ? Codec::BF16 : c, n, 1.0f, seed);
}

// All sizes up to 1100 bytes (every tail length, every 128-element plane alignment up to 550
// elements), a sparse sweep to 20000, and each side of the first block boundaries.
std::vector<size_t> sizes_for(Codec c) {
  std::vector<size_t> s;
  for (size_t n = 0; n <= 1100; ++n) s.push_back(n);
  for (size_t n = 1101; n <= 20000; n += 37) s.push_back(n);
  const size_t block = size_t(kBlockElems) * elem_bytes(c);
  for (size_t k : {1, 2, 3, 4, 16, 17})
    for (int d = -9; d <= 9; ++d) s.push_back(k * block + d);
  return s;
}

TEST(RoundTrip, SizesAcrossBlockBoundaries) {
  for (Codec c : kAllCodecs) {
    int coded = 0;
    for (size_t n : sizes_for(c)) {
      Bytes in = typed_gaussian(c, n, uint32_t(n));
      Bytes msg;
      ASSERT_TRUE(round_trip(c, in, &msg)) << codec_name(c) << " n=" << n;
      coded += message_codec(msg) != Codec::Raw;
      // From two blocks on, Gaussian data must be coded, not sent raw.
      if (c != Codec::Raw && n >= 2 * size_t(kBlockElems) * elem_bytes(c)) {
        ASSERT_EQ(message_codec(msg), c) << codec_name(c) << " n=" << n;
      }
    }
    if (c != Codec::Raw) {
      EXPECT_GT(coded, 100) << codec_name(c);
    }
  }
}

// An empty buffer may come as a null pointer (an empty std::vector's data()).
TEST(RoundTrip, EmptyInputWithNullPointers) {
  for (Codec c : kAllCodecs) {
    uint8_t msg[kHeaderBytes];
    size_t mn = 0, on = 1;
    ASSERT_EQ(encode(c, nullptr, 0, msg, sizeof msg, &mn), Status::kOk) << codec_name(c);
    ASSERT_EQ(mn, size_t(kHeaderBytes));
    EXPECT_EQ(decode(msg, mn, nullptr, 0, &on), Status::kOk) << codec_name(c);
    EXPECT_EQ(on, 0u);
  }
  // A coded (non-raw) header for 0 bytes is valid too, though the encoder sends raw ones.
  Header h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.codec = uint8_t(Codec::BF16);
  h.block_elems = kBlockElems;
  const Layout L = make_layout(Codec::BF16, 0);
  h.off_table = L.off_table;
  h.off_res = L.off_res;
  h.off_bits = L.off_bits;
  h.off_esc = h.total_bytes = L.off_esc;
  size_t on = 1;
  EXPECT_EQ(decode(&h, sizeof h, nullptr, 0, &on), Status::kOk);
  EXPECT_EQ(on, 0u);
}

TEST(RoundTrip, MisalignedPointers) {
  for (Codec c : kAllCodecs) {
    const size_t n = 3 * size_t(kBlockElems) * elem_bytes(c) + 5;
    const Bytes in = typed_gaussian(c, n, 7);
    const size_t cap = max_compressed_bytes(n);
    Bytes ref(cap);
    size_t ref_n = 0;
    ASSERT_EQ(encode(c, in.data(), n, ref.data(), cap, &ref_n), Status::kOk);
    for (size_t a = 0; a < 16; ++a) {
      for (size_t b = 0; b < 16; ++b) {
        // Encode from in+a into msg+b, then decode from msg+b into out+a.
        Bytes src(n + a), msg(cap + b), out(n + a);
        std::memcpy(src.data() + a, in.data(), n);
        size_t mn = 0, on = 0;
        ASSERT_EQ(encode(c, src.data() + a, n, msg.data() + b, cap, &mn), Status::kOk);
        ASSERT_EQ(mn, ref_n);
        ASSERT_EQ(std::memcmp(msg.data() + b, ref.data(), mn), 0) << "encoding depends on alignment";
        ASSERT_EQ(decode(msg.data() + b, mn, out.data() + a, n, &on), Status::kOk);
        ASSERT_EQ(std::memcmp(out.data() + a, in.data(), n), 0) << codec_name(c) << " a=" << a << " b=" << b;
      }
    }
  }
}

TEST(RoundTrip, RandomBytesFallBackToRaw) {
  for (Codec c : kAllCodecs) {
    for (size_t n : {1, 2, 3, 100, 4096, 8192 * 3 + 1, 65539, 1 << 20}) {
      Bytes msg;
      ASSERT_TRUE(round_trip(c, random_bytes(n, uint32_t(n)), &msg)) << codec_name(c) << " n=" << n;
      EXPECT_EQ(message_codec(msg), Codec::Raw) << codec_name(c) << " n=" << n;
    }
  }
}

// Elements whose exponents alternate between the two ends of the range: the window, centred on
// their mean, holds neither, so every element escapes.
Bytes all_escape(Codec c, size_t n_elems) {
  const uint32_t lo = 1, hi = geometry(c).exp_max - 1;
  std::mt19937 g(5);
  Bytes b(n_elems * elem_bytes(c));
  for (size_t i = 0; i < n_elems; ++i) {
    const uint8_t res[3] = {uint8_t(g()), uint8_t(g()), uint8_t(g())};
    put_elem(b.data(), elem_bytes(c), i, elem_join(c, i % 2 ? hi : lo, res, g() & 7));
  }
  return b;
}

TEST(RoundTrip, AllEscapeFallsBackToRawMessage) {
  for (Codec c : kFloatCodecs) {
    for (size_t elems : {size_t(3), size_t(1000), size_t(kBlockElems), size_t(3) * kBlockElems + 100}) {
      Bytes msg;
      ASSERT_TRUE(round_trip(c, all_escape(c, elems), &msg)) << codec_name(c) << " elems=" << elems;
      EXPECT_EQ(message_codec(msg), Codec::Raw) << codec_name(c) << " elems=" << elems;
    }
  }
}

TEST(RoundTrip, MixedRawAndCodedBlocks) {
  for (Codec c : kFloatCodecs) {
    const size_t blk = size_t(kBlockElems) * elem_bytes(c);
    // Gaussian and all-escape blocks alternate; the last block is partial (first 1000, then
    // 3 elements), plus a tail byte.
    for (size_t last : {1000, 3}) {
      Bytes in;
      for (int b = 0; b < 5; ++b) {
        Bytes part = b % 2 ? all_escape(c, kBlockElems) : gaussian(c, blk, 0.05f, b);
        in.insert(in.end(), part.begin(), part.end());
      }
      Bytes part = all_escape(c, last);
      in.insert(in.end(), part.begin(), part.end());
      in.push_back(0x5A);
      Bytes msg;
      ASSERT_TRUE(round_trip(c, in, &msg)) << codec_name(c);
      Message m;
      ASSERT_TRUE(parse_message(msg.data(), msg.size(), &m));
      EXPECT_EQ(m.L.codec, c);
      EXPECT_EQ(m.coded_blocks, 3) << codec_name(c);
      EXPECT_EQ(m.raw_blocks, 3) << codec_name(c);
    }
  }
}

// Sizes where a coded message of zeros (no escapes) is exactly as large as the raw one: the
// encoder must keep the coded message (FORMAT.md: raw only when coded would be larger).
TEST(RoundTrip, FallbackAtTheTie) {
  for (Codec c : kFloatCodecs) {
    int ties = 0;
    for (size_t n = elem_bytes(c); n < 40000; ++n) {
      if (make_layout(c, n).off_esc != max_compressed_bytes(n)) continue;
      ++ties;
      EXPECT_TRUE(round_trip(c, Bytes(n, 0))) << codec_name(c) << " n=" << n;
    }
    EXPECT_GT(ties, 0) << codec_name(c) << ": no tie size in range";
  }
}

TEST(RoundTrip, Zeros) {
  for (Codec c : kAllCodecs) {
    const size_t blk = size_t(kBlockElems) * elem_bytes(c);
    for (size_t n : {size_t(2), blk, 5 * blk + 1}) {
      Bytes msg;
      ASSERT_TRUE(round_trip(c, Bytes(n, 0), &msg)) << codec_name(c) << " n=" << n;
      if (c != Codec::Raw && n >= blk) {
        Message m;
        ASSERT_TRUE(parse_message(msg.data(), msg.size(), &m));
        EXPECT_EQ(m.L.codec, c);
        EXPECT_EQ(m.h.esc_bytes, 0u) << "zeros are inside window [0, 6]";
      }
    }
  }
}

// A wrong guess of the element type costs ratio, never correctness.
TEST(RoundTrip, WrongTypeGuessIsExact) {
  const size_t n = 5 * size_t(kBlockElems) * 4 + 3;
  for (Codec type : kFloatCodecs) {
    for (float sigma : {0.02f, 1.0f}) {
      const Bytes in = gaussian(type, n, sigma, 11);
      for (Codec c : kAllCodecs) {
        Bytes msg;
        EXPECT_TRUE(round_trip(c, in, &msg)) << codec_name(type) << " data as " << codec_name(c);
      }
    }
  }
}

TEST(RoundTrip, GaussianBf16RatioGuard) {
  const Bytes in = gaussian(Codec::BF16, 200000, 0.02f, 1);
  Bytes msg;
  ASSERT_TRUE(round_trip(Codec::BF16, in, &msg));
  const double ratio = double(msg.size()) / in.size();
  RecordProperty("ratio", std::to_string(ratio));
  EXPECT_LT(ratio, 0.72);
}

TEST(Options, ChecksumStoredForEveryCodec) {
  EncodeOptions opt;
  opt.checksum = true;
  for (Codec c : kAllCodecs)
    for (size_t n : {0, 1, 5, 3 * 4096 * 4 + 1})
      EXPECT_TRUE(round_trip(c, typed_gaussian(c, n, 3), nullptr, opt)) << codec_name(c) << " n=" << n;
}

TEST(Options, MaxRatioForcesRawMessage) {
  const Bytes in = gaussian(Codec::BF16, 100000, 1.0f, 2);
  // Out-of-range limits are clamped to [0, 1] (NaN counts as 0), never undefined behaviour.
  for (double max_ratio : {-1.0, std::nan(""), 0.0, 0.5, 0.9, 1.0, 7.0}) {
    EncodeOptions opt;
    opt.max_ratio = max_ratio;
    Bytes msg;
    ASSERT_TRUE(round_trip(Codec::BF16, in, &msg, opt)) << max_ratio;
    // Gaussian bf16 codes to about 0.70 of its size.
    EXPECT_EQ(message_codec(msg), max_ratio >= 0.72 ? Codec::BF16 : Codec::Raw) << max_ratio;
  }
}

TEST(Capacity, EncodeNeverWritesPastCap) {
  for (Codec c : kAllCodecs) {
    const Bytes in = typed_gaussian(c, 40000, 4);
    size_t need = 0;
    Bytes full(max_compressed_bytes(in.size()));
    ASSERT_EQ(encode(c, in.data(), in.size(), full.data(), full.size(), &need), Status::kOk);
    for (size_t cap : {size_t(0), size_t(100), need / 2, need - 1, need}) {
      Bytes out(cap + kGuard, kGuardByte);
      size_t on = 0;
      Status s = encode(c, in.data(), in.size(), out.data(), cap, &on);
      EXPECT_TRUE(guard_intact(out, cap)) << codec_name(c) << " cap=" << cap;
      if (cap < need) {
        EXPECT_EQ(s, Status::kNoSpace) << codec_name(c) << " cap=" << cap;
      } else {
        ASSERT_EQ(s, Status::kOk);
        EXPECT_EQ(on, need);
        EXPECT_EQ(std::memcmp(out.data(), full.data(), need), 0);
      }
    }
  }
}

TEST(Capacity, DecodeNeedsRoomForOriginal) {
  for (Codec c : kAllCodecs) {
    const Bytes in = typed_gaussian(c, 9000, 6);
    Bytes msg;
    ASSERT_TRUE(round_trip(c, in, &msg));
    for (size_t cap : {size_t(0), size_t(1), in.size() - 1}) {
      Bytes out(cap + kGuard, kGuardByte);
      size_t on = 0;
      EXPECT_EQ(decode(msg.data(), msg.size(), out.data(), cap, &on), Status::kNoSpace) << codec_name(c);
      EXPECT_TRUE(guard_intact(out, cap)) << codec_name(c) << " cap=" << cap;
    }
  }
}

TEST(Capacity, TooManyElementsRejectedBeforeReading) {
  // The input is never read: the element count alone exceeds the format's 32-bit limit.
  uint8_t in[8] = {}, out[256];
  size_t on = 0;
  EXPECT_EQ(encode(Codec::BF16, in, (kMaxElems + 1) * 2, out, sizeof out, &on), Status::kTooLarge);
  EXPECT_EQ(encode(Codec::FP32, in, (kMaxElems + 1) * 4, out, sizeof out, &on), Status::kTooLarge);
}

TEST(Crc32c, KnownVectorsAndChaining) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xE3069283u);  // the standard CRC-32C check value
  EXPECT_EQ(crc32c(s, 0), 0u);
  const Bytes r = random_bytes(1001, 9);
  for (size_t cut : {0, 1, 7, 8, 500, 1001})
    EXPECT_EQ(crc32c(r.data() + cut, r.size() - cut, crc32c(r.data(), cut)), crc32c(r.data(), r.size())) << cut;
}

TEST(Classify, TypedGaussianData) {
  for (Codec type : kFloatCodecs)
    for (float sigma : {1e-3f, 0.02f, 1.0f, 30.0f})
      for (size_t n : {size_t(8192), size_t(1) << 20})
        EXPECT_EQ(classify(gaussian(type, n, sigma, 8).data(), n), type)
            << codec_name(type) << " sigma=" << sigma << " n=" << n;
}

TEST(Classify, RandomBytesAndTinyBuffersAreRaw) {
  for (size_t n : {size_t(64), size_t(4096), size_t(1) << 20}) EXPECT_EQ(classify(random_bytes(n, 1).data(), n), Codec::Raw) << n;
  for (size_t n = 0; n < 64; ++n) EXPECT_EQ(classify(gaussian(Codec::BF16, n, 1, 1).data(), n), Codec::Raw) << n;
}

TEST(Classify, AnySizeGivesAUsableCodec) {
  // Odd sizes exercise the sampling arithmetic; the guess must always round-trip.
  for (size_t n = 64; n < 5000; n += 13) {
    const Bytes in = gaussian(Codec::FP16, n, 1.0f, uint32_t(n));
    const Codec c = classify(in.data(), n);
    ASSERT_LT(int(c), kNumCodecs);
    ASSERT_TRUE(round_trip(c, in)) << n;
  }
}

}  // namespace
}  // namespace zipccl::test
