// Corrupted and hostile messages: decode must return an error, never crash, never write past
// out_cap. Each message is decoded from an exact-size heap copy so that ASan sees any over-read.
#include <cstddef>

#include "test_util.h"

namespace zipccl::test {
namespace {

constexpr size_t kTailOffset = offsetof(Header, tail);

struct Sample {
  Codec codec;
  bool checksum;
  Bytes orig, msg;
  Message m;
};

std::string name(const Sample& s) { return std::string(codec_name(s.codec)) + (s.checksum ? "+crc" : ""); }

// A small message with a coded block that has escapes, a partial raw block and tail bytes
// (one Gaussian block with some exact zeros, then 600 elements whose exponents all escape).
Sample make_sample(Codec c, bool checksum) {
  Sample s{c, checksum, {}, {}, {}};
  const uint32_t eb = elem_bytes(c);
  if (c == Codec::Raw) {
    s.orig = random_bytes(300, 1);
  } else {
    s.orig = gaussian(c, size_t(kBlockElems) * eb, 0.05f, 2);
    for (size_t i = 0; i < kBlockElems; i += 37) put_elem(s.orig.data(), eb, i, 0);
    std::mt19937 g(3);
    for (uint32_t i = 0; i < 600; ++i) {
      const uint8_t res[3] = {uint8_t(g()), uint8_t(g()), uint8_t(g())};
      uint32_t v = elem_join(c, i % 2 ? geometry(c).exp_max - 1 : 1, res, g() & 7);
      for (uint32_t k = 0; k < eb; ++k) s.orig.push_back(uint8_t(v >> (8 * k)));
    }
    for (uint32_t k = 0; k + 1 < eb; ++k) s.orig.push_back(uint8_t(0xC0 + k));
  }
  EncodeOptions opt;
  opt.checksum = checksum;
  EXPECT_TRUE(round_trip(c, s.orig, &s.msg, opt));
  EXPECT_TRUE(parse_message(s.msg.data(), s.msg.size(), &s.m));
  return s;
}

std::vector<Sample> samples() {
  std::vector<Sample> v;
  for (Codec c : kAllCodecs)
    for (bool crc : {false, true}) v.push_back(make_sample(c, crc));
  return v;
}

struct Result {
  Status status;
  size_t out_bytes;
  bool guard_ok;
  Bytes out;  // the out_cap bytes
};

// Decode from an exact-size copy into out_cap bytes followed by a guard region.
Result try_decode(const Bytes& msg, size_t out_cap) {
  Bytes in(msg);
  Bytes out(out_cap + kGuard, kGuardByte);
  size_t on = 0;
  Status s = decode(in.data(), in.size(), out.data(), out_cap, &on);
  return {s, on, guard_intact(out, out_cap), Bytes(out.begin(), out.begin() + out_cap)};
}

template <class T>
void poke(Bytes& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}
template <class T>
T peek(const Bytes& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}

size_t entry_off(const Sample& s, uint32_t b) { return s.m.L.off_table + size_t(b) * kBlockEntryBytes; }

TEST(Corrupt, SamplesCoverBothBlockModes) {
  for (const Sample& s : samples()) {
    if (s.codec == Codec::Raw) continue;
    EXPECT_EQ(s.m.L.codec, s.codec) << name(s);
    ASSERT_EQ(s.m.L.n_blocks, 2u) << name(s);
    EXPECT_EQ(s.m.table[0].mode, kBlockCoded) << name(s);
    EXPECT_GT(s.m.table[0].esc_count, 0) << name(s);
    EXPECT_EQ(s.m.table[1].mode, kBlockRaw) << name(s);
    EXPECT_GT(s.m.L.tail_bytes, 0) << name(s);
  }
}

TEST(Corrupt, TruncatedAtEveryLength) {
  for (const Sample& s : samples()) {
    for (size_t len = 0; len < s.msg.size(); ++len) {
      Bytes cut(s.msg.begin(), s.msg.begin() + len);
      Layout L;
      ASSERT_EQ(parse_header(cut.data(), len, &L, nullptr), Status::kTruncated) << name(s) << " len=" << len;
      Result r = try_decode(cut, s.orig.size());
      ASSERT_EQ(r.status, Status::kTruncated) << name(s) << " len=" << len;
      ASSERT_TRUE(r.guard_ok);
    }
  }
}

// Every header byte is either validated against the layout or is payload (the tail bytes);
// with a checksum, changing payload is detected too.
TEST(Corrupt, EveryHeaderBytePerturbed) {
  for (const Sample& s : samples()) {
    for (size_t i = 0; i < kHeaderBytes; ++i) {
      const bool payload = i >= kTailOffset && i < kTailOffset + s.m.L.tail_bytes;
      for (int p = 0; p < 4; ++p) {
        Bytes bad(s.msg);
        const uint8_t x = bad[i];
        bad[i] = p == 0 ? x ^ 1 : p == 1 ? x ^ 0x80 : p == 2 ? x ^ 0xFF : uint8_t(x + 1);
        Result r = try_decode(bad, s.orig.size());
        ASSERT_TRUE(r.guard_ok) << name(s) << " byte " << i;
        if (payload && !s.checksum) {
          ASSERT_EQ(r.status, Status::kOk) << name(s) << " byte " << i;
          ASSERT_EQ(r.out_bytes, s.orig.size());
          ASSERT_NE(r.out, s.orig);
        } else {
          ASSERT_NE(r.status, Status::kOk) << name(s) << " byte " << i << " perturbation " << p;
        }
      }
    }
  }
}

// The GPU decoder's data tiles decode from a header's claimed layout before check_header() has
// run, when claimed_layout_in_bounds() holds: it must hold for every header check_header()
// accepts (coded messages of sizes around block and alignment boundaries, the message's exact
// length and orig_bytes as the output), and where a lying field breaks it, check_header() must
// refuse the header too.
TEST(Corrupt, AcceptedHeadersHaveInBoundsLayouts) {
  size_t checked = 0, refused = 0;
  for (Codec c : kFloatCodecs) {
    const uint32_t eb = elem_bytes(c);
    for (size_t elems : {size_t(1), size_t(7), size_t(8), size_t(127), size_t(128), size_t(129), size_t(4095),
                         size_t(4096), size_t(4097), size_t(3 * 4096 + 1000), size_t(40000)}) {
      for (size_t tail = 0; tail < eb; tail += eb > 2 ? 3 : 1) {
        const Bytes in = gaussian(c, elems * eb + tail, 0.05f, uint32_t(elems + tail));
        Bytes msg(max_compressed_bytes(in.size()));
        size_t len = 0;
        ASSERT_EQ(encode(c, in.data(), in.size(), msg.data(), msg.size(), &len), Status::kOk);
        Header h;
        memcpy(&h, msg.data(), sizeof h);
        if (h.codec == uint8_t(Codec::Raw)) continue;
        Layout L;
        ASSERT_EQ(check_header(h, len, &L), Status::kOk);
        EXPECT_TRUE(claimed_layout_in_bounds(h, eb, len, in.size())) << codec_name(c) << " " << in.size();
        ++checked;
        // Each size and offset field larger or smaller by an alignment step or one block.
        for (uint64_t Header::*f : {&Header::n_elems, &Header::off_res, &Header::res_stride, &Header::off_bits,
                                     &Header::bit_stride, &Header::off_esc, &Header::esc_bytes}) {
          for (int64_t d : {int64_t(-kBlockElems), int64_t(-kAlign), int64_t(-1), int64_t(1), int64_t(kAlign),
                            int64_t(kBlockElems), int64_t(len)}) {
            Header lie = h;
            lie.*f += d;
            if (claimed_layout_in_bounds(lie, eb, len, in.size())) continue;
            ++refused;
            EXPECT_NE(check_header(lie, len, &L), Status::kOk) << codec_name(c) << " " << in.size();
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 25u);  // the small sizes go out Raw
  EXPECT_GE(refused, 100u);
}

TEST(Corrupt, LyingSizesInAConsistentHeader) {
  // Headers that agree with the layout of a huge message but arrive without its body.
  struct Case {
    Codec c;
    uint64_t orig;
    Status want;
  } cases[] = {
      {Codec::BF16, uint64_t(1) << 32, Status::kTruncated},
      {Codec::FP32, kMaxElems * 4 + 3, Status::kTruncated},
      {Codec::BF16, (kMaxElems + 1) * 2, Status::kBadHeader},  // more elements than v1 allows
      {Codec::Raw, uint64_t(1) << 40, Status::kTruncated},
      {Codec::Raw, uint64_t(1) << 50, Status::kBadHeader},
  };
  for (const Case& k : cases) {
    const Layout L = make_layout(k.c, k.orig);
    const uint8_t no_tail[4] = {};
    const Header h = make_header(L, k.c == Codec::Raw ? k.orig : 0, no_tail, false, 0);
    Bytes msg(sizeof h);
    std::memcpy(msg.data(), &h, sizeof h);
    Result r = try_decode(msg, 64);
    EXPECT_EQ(r.status, k.want) << codec_name(k.c) << " orig=" << k.orig;
    EXPECT_TRUE(r.guard_ok);
  }
}

// check_header() evaluates its kBadHeader conditions together: each one alone still fails the
// header, and the statuses keep their order (short input, magic, version, field errors, then a
// body shorter than total_bytes), which the GPU decoder must report identically.
TEST(Corrupt, HeaderStatusOrder) {
  const uint8_t tail[4] = {0xAB, 0xCD, 0xEF, 0};
  const Layout L = make_layout(Codec::FP32, 4 * 5000 + 3);  // 2 blocks, 3 tail bytes
  const Header good = make_header(L, 40, tail, false, 0);
  const uint64_t have = good.total_bytes;
  Layout out{};
  ASSERT_EQ(check_header(good, have, &out), Status::kOk);
  EXPECT_EQ(out.off_esc, L.off_esc);
  struct Case {
    const char* what;
    void (*bad)(Header&);
  } field_errors[] = {
      {"codec", [](Header& h) { h.codec = kNumCodecs; }},
      {"flags", [](Header& h) { h.flags = 2; }},
      {"reserved", [](Header& h) { h.reserved[23] = 1; }},
      {"checksum without flag", [](Header& h) { h.checksum = 7; }},
      {"too many elements", [](Header& h) { h.orig_bytes = (kMaxElems + 1) * 4; }},
      {"n_elems", [](Header& h) { ++h.n_elems; }},
      {"block_elems", [](Header& h) { h.block_elems = 2048; }},
      {"n_blocks", [](Header& h) { ++h.n_blocks; }},
      {"tail_bytes", [](Header& h) { h.tail_bytes = 2; }},
      {"off_table", [](Header& h) { h.off_table += 128; }},
      {"off_res", [](Header& h) { h.off_res += 128; }},
      {"res_stride", [](Header& h) { h.res_stride += 128; }},
      {"off_bits", [](Header& h) { h.off_bits += 128; }},
      {"bit_stride", [](Header& h) { h.bit_stride += 128; }},
      {"off_esc", [](Header& h) { h.off_esc += 128; }},
      {"tail byte past tail_bytes", [](Header& h) { h.tail[3] = 1; }},
      {"esc_bytes > n_elems", [](Header& h) {
         h.esc_bytes = h.n_elems + 1;
         h.total_bytes = h.off_esc + h.esc_bytes;
       }},
      {"total_bytes", [](Header& h) { h.total_bytes -= 1; }},
  };
  for (const Case& k : field_errors) {
    Header h = good;
    k.bad(h);
    EXPECT_EQ(check_header(h, have, &out), Status::kBadHeader) << k.what;
    EXPECT_EQ(check_header(h, 0, &out), Status::kTruncated) << k.what << ": short input first";
    Header v = h;
    v.version = kVersion + 1;
    EXPECT_EQ(check_header(v, have, &out), Status::kBadVersion) << k.what << ": version before fields";
    v.magic = ~kMagic;
    EXPECT_EQ(check_header(v, have, &out), Status::kBadMagic) << k.what << ": magic before version";
    EXPECT_EQ(check_header(h, have - 1, &out), Status::kBadHeader) << k.what << ": fields before the body";
  }
  EXPECT_EQ(check_header(good, have - 1, &out), Status::kTruncated);
  // Raw: the escape section is the payload.
  const Layout R = make_layout(Codec::Raw, 300);
  Header raw = make_header(R, 300, tail, false, 0);
  EXPECT_EQ(check_header(raw, raw.total_bytes, &out), Status::kOk);
  raw.esc_bytes = 299;
  raw.total_bytes -= 1;
  EXPECT_EQ(check_header(raw, raw.total_bytes, &out), Status::kBadHeader);
}

TEST(Corrupt, EscapeSectionLengthDisagreesWithTable) {
  for (const Sample& s : samples()) {
    if (s.codec == Codec::Raw) continue;
    for (int d : {-1, 1}) {
      Bytes bad(s.msg);
      if (d > 0) bad.push_back(0);
      else bad.pop_back();
      poke<uint64_t>(bad, offsetof(Header, esc_bytes), s.m.h.esc_bytes + d);
      poke<uint64_t>(bad, offsetof(Header, total_bytes), s.m.h.total_bytes + d);
      EXPECT_EQ(try_decode(bad, s.orig.size()).status, Status::kBadBlock) << name(s) << " d=" << d;
    }
  }
}

TEST(Corrupt, BlockTableEntries) {
  for (const Sample& s : samples()) {
    if (s.codec == Codec::Raw) continue;
    const size_t e0 = entry_off(s, 0), e1 = entry_off(s, 1);
    const BlockEntry b0 = s.m.table[0], b1 = s.m.table[1];
    const uint8_t max_base = uint8_t(geometry(s.codec).exp_max - (kWindow - 1));
    auto expect = [&](const char* what, Status want, auto&& edit) {
      Bytes bad(s.msg);
      edit(bad);
      Result r = try_decode(bad, s.orig.size());
      EXPECT_TRUE(r.guard_ok) << name(s) << ": " << what;
      if (want == Status::kOk)  // any error will do
        EXPECT_NE(r.status, Status::kOk) << name(s) << ": " << what;
      else
        EXPECT_EQ(r.status, want) << name(s) << ": " << what << " gave " << status_string(r.status);
    };
    const size_t off = offsetof(BlockEntry, esc_offset), cnt = offsetof(BlockEntry, esc_count),
                 base = offsetof(BlockEntry, base), mode = offsetof(BlockEntry, mode);
    expect("first offset +1", Status::kBadBlock, [&](Bytes& m) { poke<uint32_t>(m, e0 + off, 1); });
    expect("second offset -1 (overlap)", Status::kBadBlock,
           [&](Bytes& m) { poke<uint32_t>(m, e1 + off, b1.esc_offset - 1); });
    expect("second offset +1 (gap)", Status::kBadBlock, [&](Bytes& m) {
      poke<uint32_t>(m, e1 + off, b1.esc_offset + 1);
      poke<uint16_t>(m, e1 + cnt, b1.esc_count - 1);
    });
    expect("offsets swapped", Status::kBadBlock, [&](Bytes& m) {
      poke<uint32_t>(m, e0 + off, b1.esc_offset);
      poke<uint32_t>(m, e1 + off, b0.esc_offset);
    });
    expect("offset far out of range", Status::kBadBlock, [&](Bytes& m) { poke<uint32_t>(m, e1 + off, 0xFFFFFFF0u); });
    // The chunks still tile the section, but the coded block's count disagrees with its codes.
    expect("coded count +1, tiling kept", Status::kBadEscapes, [&](Bytes& m) {
      poke<uint16_t>(m, e0 + cnt, b0.esc_count + 1);
      poke<uint32_t>(m, e1 + off, b1.esc_offset + 1);
    });
    expect("coded count -1, tiling kept", Status::kBadEscapes, [&](Bytes& m) {
      poke<uint16_t>(m, e0 + cnt, b0.esc_count - 1);
      poke<uint32_t>(m, e1 + off, b1.esc_offset - 1);
    });
    expect("raw count -1", Status::kBadBlock, [&](Bytes& m) { poke<uint16_t>(m, e1 + cnt, b1.esc_count - 1); });
    expect("count 0xFFFF", Status::kBadBlock, [&](Bytes& m) { poke<uint16_t>(m, e0 + cnt, 0xFFFF); });
    expect("mode 2", Status::kBadBlock, [&](Bytes& m) { m[e0 + mode] = 2; });
    expect("mode 0xFF", Status::kBadBlock, [&](Bytes& m) { m[e1 + mode] = 0xFF; });
    expect("coded block marked raw", Status::kOk, [&](Bytes& m) { m[e0 + mode] = kBlockRaw; });
    expect("raw block marked coded", Status::kOk, [&](Bytes& m) { m[e1 + mode] = kBlockCoded; });
    expect("raw block with a base", Status::kBadBlock, [&](Bytes& m) { m[e1 + base] = 1; });
    expect("window past the exponent range", Status::kBadBlock, [&](Bytes& m) { m[e0 + base] = max_base + 1; });
    expect("base 0xFF", Status::kBadBlock, [&](Bytes& m) { m[e0 + base] = 0xFF; });
    if (s.checksum) {
      // A valid but different window decodes to other values: only the checksum can tell.
      expect("base moved", Status::kBadChecksum, [&](Bytes& m) { m[e0 + base] = b0.base ? b0.base - 1 : 1; });
    }
  }
}

// Position of element i in bit-plane k of a message: byte and bit.
std::pair<size_t, int> plane_bit(const Layout& L, uint32_t k, uint64_t i) {
  return {L.off_bits + k * L.bit_stride + i / 8, int(i % 8)};
}

TEST(Corrupt, CodesDisagreeWithEscapeCount) {
  for (const Sample& s : samples()) {
    if (s.codec == Codec::Raw) continue;
    const Layout& L = s.m.L;
    auto code = [&](uint64_t i) {
      uint32_t c = 0;
      for (uint32_t k = 0; k < 3; ++k) {
        auto [byte, bit] = plane_bit(L, k, i);
        c |= ((s.msg[byte] >> bit) & 1u) << k;
      }
      return c;
    };
    uint64_t esc = 0, coded = 0;
    while (code(esc) != 0) ++esc;
    while (code(coded) == 0) ++coded;
    ASSERT_LT(esc, uint64_t(kBlockElems));
    Bytes bad(s.msg);
    auto [byte, bit] = plane_bit(L, 0, esc);
    bad[byte] ^= uint8_t(1 << bit);  // an escape becomes code 1
    EXPECT_EQ(try_decode(bad, s.orig.size()).status, Status::kBadEscapes) << name(s);
    bad = s.msg;
    for (uint32_t k = 0; k < 3; ++k) {
      auto [cb, cbit] = plane_bit(L, k, coded);
      bad[cb] &= uint8_t(~(1 << cbit));  // a coded element becomes an escape
    }
    EXPECT_EQ(try_decode(bad, s.orig.size()).status, Status::kBadEscapes) << name(s);
  }
}

TEST(Corrupt, Fp16EscapeAbove31) {
  for (bool crc : {false, true}) {
    Sample s = make_sample(Codec::FP16, crc);
    ASSERT_EQ(s.m.table[0].mode, kBlockCoded);
    ASSERT_GT(s.m.table[0].esc_count, 0);
    for (uint8_t v : {uint8_t(32), uint8_t(0x80), uint8_t(0xFF)}) {
      Bytes bad(s.msg);
      bad[s.m.L.off_esc + s.m.table[0].esc_offset + s.m.table[0].esc_count - 1] = v;
      EXPECT_EQ(try_decode(bad, s.orig.size()).status, Status::kBadEscapes) << int(v);
    }
  }
}

TEST(Corrupt, ChecksumMismatch) {
  for (const Sample& s : samples()) {
    if (!s.checksum) continue;
    // The first payload byte after the header and table: a residual byte, or raw payload.
    Bytes bad(s.msg);
    bad[s.m.L.off_res] ^= 0x10;
    EXPECT_EQ(try_decode(bad, s.orig.size()).status, Status::kBadChecksum) << name(s);
    bad = s.msg;
    poke<uint32_t>(bad, offsetof(Header, checksum), s.m.h.checksum ^ 1);
    EXPECT_EQ(try_decode(bad, s.orig.size()).status, Status::kBadChecksum) << name(s);
  }
}

// Random bit flips anywhere in the message (half of them in the header and block table, where
// the structure lives): decode errors, or returns exactly the original length; with a checksum,
// success means the original bytes. Never writes past out_cap.
TEST(Corrupt, RandomBitFlipSweep) {
  std::mt19937 g(12345);
  for (const Sample& s : samples()) {
    const size_t structure = s.m.L.codec == Codec::Raw ? kHeaderBytes : size_t(s.m.L.off_res);
    int ok = 0, errors = 0;
    for (int iter = 0; iter < 3000; ++iter) {
      Bytes bad(s.msg);
      const int flips = 1 + g() % 4;
      for (int f = 0; f < flips; ++f) {
        const size_t pos = g() % 2 ? g() % structure : g() % bad.size();
        bad[pos] ^= uint8_t(1u << (g() % 8));
      }
      Result r = try_decode(bad, s.orig.size());
      ASSERT_TRUE(r.guard_ok) << name(s) << " iter " << iter;
      if (r.status != Status::kOk) {
        ++errors;
        continue;
      }
      ++ok;
      ASSERT_EQ(r.out_bytes, s.orig.size()) << name(s) << " iter " << iter;
      size_t n = 0;
      ASSERT_EQ(decoded_size(bad.data(), bad.size(), &n), Status::kOk);
      ASSERT_EQ(n, s.orig.size());
      if (s.checksum) {
        ASSERT_EQ(r.out, s.orig) << name(s) << " iter " << iter;
      }
    }
    EXPECT_GT(errors, 0) << name(s);
    if (!s.checksum) {
      EXPECT_GT(ok, 0) << name(s) << ": no flip reached a successful decode";
    }
  }
}

}  // namespace
}  // namespace zipccl::test
