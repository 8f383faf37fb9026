// Shared helpers of the codec tests: data generators, a message reader built only on format.h,
// and a round trip that checks every format invariant on the way.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "zipccl/codec.h"

namespace zipccl::test {

using Bytes = std::vector<uint8_t>;

inline constexpr Codec kAllCodecs[] = {Codec::Raw, Codec::BF16, Codec::FP16, Codec::FP32};
inline constexpr Codec kFloatCodecs[] = {Codec::BF16, Codec::FP16, Codec::FP32};

inline uint32_t elem_bytes(Codec c) { return geometry(c).elem_bytes; }

inline uint32_t get_elem(const uint8_t* p, uint32_t eb, size_t i) {
  uint32_t v = 0;
  std::memcpy(&v, p + i * eb, eb);
  return v;
}
inline void put_elem(uint8_t* p, uint32_t eb, size_t i, uint32_t v) { std::memcpy(p + i * eb, &v, eb); }

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// IEEE half from float, round toward zero; values below the half range flush to signed zero.
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000;
  const int e = int((u >> 23) & 0xFF) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  if (e <= 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | (uint32_t(e) << 10) | ((u >> 13) & 0x3FF));
}

// Element bits of a float in a float codec's type.
inline uint32_t float_to_elem(Codec type, float f) {
  switch (type) {
    case Codec::BF16: return f32_bits(f) >> 16;
    case Codec::FP16: return f32_to_f16(f);
    default: return f32_bits(f);
  }
}

// n bytes of N(0, sigma^2) values of a float type; a partial last element gets random bytes.
inline Bytes gaussian(Codec type, size_t n, float sigma, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  Bytes b(n);
  const uint32_t eb = elem_bytes(type);
  const size_t elems = n / eb;
  for (size_t i = 0; i < elems; ++i) put_elem(b.data(), eb, i, float_to_elem(type, d(g)));
  for (size_t i = elems * eb; i < n; ++i) b[i] = static_cast<uint8_t>(g());
  return b;
}

inline Bytes random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(g());
  return b;
}

// A parsed message: header, layout and block table, read with format.h definitions only.
struct Message {
  Header h{};
  Layout L{};
  std::vector<BlockEntry> table;
  int raw_blocks = 0, coded_blocks = 0;
};

inline ::testing::AssertionResult parse_message(const uint8_t* m, size_t n, Message* out) {
  Status s = parse_header(m, n, &out->L, &out->h);
  if (s != Status::kOk) return ::testing::AssertionFailure() << "parse_header: " << status_string(s);
  out->table.resize(out->L.n_blocks);
  out->raw_blocks = out->coded_blocks = 0;
  for (uint32_t b = 0; b < out->L.n_blocks; ++b) {
    std::memcpy(&out->table[b], m + out->L.off_table + uint64_t(b) * kBlockEntryBytes, kBlockEntryBytes);
    (out->table[b].mode == kBlockRaw ? out->raw_blocks : out->coded_blocks)++;
  }
  return ::testing::AssertionSuccess();
}

// What FORMAT.md prescribes for block b of input `in`: the window base from the mean nonzero
// exponent, moved by one where that leaves fewer escapes (counted here by brute force; ties keep
// the mean's base, then the lower one), the escape count under it, raw mode when escapes exceed
// the raw block's chunk.
struct BlockSpec {
  uint32_t base, escapes, chunk;
  bool raw;
};

inline BlockSpec block_spec(const Layout& L, const uint8_t* in, uint32_t b) {
  const uint32_t nb = block_elems(L, b);
  const uint64_t first = uint64_t(b) * kBlockElems;
  uint64_t sum = 0;
  uint32_t cnt = 0;
  for (uint32_t i = 0; i < nb; ++i) {
    const uint32_t ex = elem_exponent(L.codec, get_elem(in, L.g.elem_bytes, first + i));
    sum += ex;
    cnt += ex != 0;
  }
  const uint32_t mean_base = window_base(L.codec, sum, cnt), max_base = L.g.exp_max - (kWindow - 1);
  auto escapes_at = [&](uint32_t base) {
    uint32_t e = 0;
    for (uint32_t i = 0; i < nb; ++i) e += exp_code(elem_exponent(L.codec, get_elem(in, L.g.elem_bytes, first + i)), base) == 0;
    return e;
  };
  BlockSpec s{mean_base, escapes_at(mean_base), 0, false};
  for (uint32_t base : {mean_base - 1, mean_base + 1}) {
    if (base > max_base) continue;  // (mean_base - 1 wraps when mean_base is 0)
    const uint32_t e = escapes_at(base);
    if (e < s.escapes) s = BlockSpec{base, e, 0, false};
  }
  s.raw = s.escapes > raw_chunk_bytes(L, nb);
  s.chunk = s.raw ? raw_chunk_bytes(L, nb) : s.escapes;
  return s;
}

// Size of the coded (non-raw) message for in[0, n) under codec c.
inline uint64_t coded_size(Codec c, const uint8_t* in, size_t n) {
  const Layout L = make_layout(c, n);
  uint64_t esc = 0;
  for (uint32_t b = 0; b < L.n_blocks; ++b) esc += block_spec(L, in, b).chunk;
  return L.off_esc + esc;
}

// Format invariants of an encoder output for input in[0, n): every byte not carrying data is
// zero, and each block follows the window rule of format.h (which the GPU encoder must match).
inline ::testing::AssertionResult check_canonical(const uint8_t* m, size_t mn, const uint8_t* in, size_t n) {
  Message msg;
  auto r = parse_message(m, mn, &msg);
  if (!r) return r;
  const Layout& L = msg.L;
  const Header& h = msg.h;
  if (h.total_bytes != mn) return ::testing::AssertionFailure() << "total_bytes " << h.total_bytes << " != " << mn;
  if (h.orig_bytes != n) return ::testing::AssertionFailure() << "orig_bytes " << h.orig_bytes << " != " << n;
  if (mn > max_compressed_bytes(n)) return ::testing::AssertionFailure() << "message larger than max_compressed_bytes";
  if (L.codec == Codec::Raw) {
    if (n && std::memcmp(m + kHeaderBytes, in, n) != 0) return ::testing::AssertionFailure() << "raw payload differs";
    return ::testing::AssertionSuccess();
  }
  auto zero = [&](uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i)
      if (m[i]) return false;
    return true;
  };
  if (!zero(L.off_table + uint64_t(L.n_blocks) * kBlockEntryBytes, L.off_res))
    return ::testing::AssertionFailure() << "table padding not zero";
  for (uint32_t r = 0; r < L.g.res_planes; ++r)
    if (!zero(L.off_res + r * L.res_stride + L.n_elems, L.off_res + (r + 1) * L.res_stride))
      return ::testing::AssertionFailure() << "residual plane " << r << " padding not zero";
  for (uint32_t k = 0; k < L.g.bit_planes; ++k)
    if (!zero(L.off_bits + k * L.bit_stride + (L.n_elems + 7) / 8, L.off_bits + (k + 1) * L.bit_stride))
      return ::testing::AssertionFailure() << "bit-plane " << k << " padding not zero";
  if (L.tail_bytes && std::memcmp(h.tail, in + L.n_elems * L.g.elem_bytes, L.tail_bytes) != 0)
    return ::testing::AssertionFailure() << "header tail differs from input tail";

  for (uint32_t b = 0; b < L.n_blocks; ++b) {
    const BlockEntry& e = msg.table[b];
    const uint32_t nb = block_elems(L, b);
    const uint32_t groups = (nb + 7) / 8;
    const uint8_t* planes = m + L.off_bits + uint64_t(b) * kBlockElems / 8;
    const BlockSpec want = block_spec(L, in, b);
    if ((e.mode == kBlockRaw) != want.raw)
      return ::testing::AssertionFailure() << "block " << b << " mode " << int(e.mode) << " with " << want.escapes
                                           << " escapes";
    if (want.raw) {
      if (e.base != 0 || e.esc_count != raw_chunk_bytes(L, nb))
        return ::testing::AssertionFailure() << "raw block " << b << " entry";
      // Plane slots past the block's spilled top bytes are padding.
      for (uint32_t slot = raw_plane_bytes(L, nb); slot < L.g.bit_planes * groups; ++slot)
        if (planes[(slot / groups) * L.bit_stride + slot % groups])
          return ::testing::AssertionFailure() << "raw block " << b << " plane padding not zero";
    } else {
      if (e.base != want.base || e.esc_count != want.escapes)
        return ::testing::AssertionFailure() << "coded block " << b << " base " << int(e.base) << " (want "
                                             << want.base << ") escapes " << e.esc_count << " (want " << want.escapes
                                             << ")";
      const uint32_t used = nb % 8;
      if (used)
        for (uint32_t k = 0; k < L.g.bit_planes; ++k)
          if (planes[k * L.bit_stride + groups - 1] >> used)
            return ::testing::AssertionFailure() << "coded block " << b << " bits past the last element";
    }
  }
  return ::testing::AssertionSuccess();
}

constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;

inline bool guard_intact(const Bytes& buf, size_t from) {
  for (size_t i = from; i < buf.size(); ++i)
    if (buf[i] != kGuardByte) return false;
  return true;
}

// Encode in[0, n) as codec c, check the message invariants (size bound, determinism, canonical
// padding, parse_header/decoded_size), decode into a buffer of exactly n bytes followed by a
// guard region, and compare. The message is returned through *msg_out.
inline ::testing::AssertionResult round_trip(Codec c, const uint8_t* in, size_t n, Bytes* msg_out = nullptr,
                                             const EncodeOptions& opt = {}) {
  const size_t cap = max_compressed_bytes(n);
  // Two encodes into differently pre-filled buffers: equal outputs mean no byte of the message
  // depends on what the buffer held before.
  Bytes a(cap + kGuard, kGuardByte), b(cap, 0x00);
  size_t an = 0, bn = 0;
  Status s = encode(c, in, n, a.data(), cap, &an, opt);
  if (s != Status::kOk) return ::testing::AssertionFailure() << "encode: " << status_string(s);
  if (!guard_intact(a, cap)) return ::testing::AssertionFailure() << "encode wrote past out_cap";
  s = encode(c, in, n, b.data(), cap, &bn, opt);
  if (s != Status::kOk || bn != an || std::memcmp(a.data(), b.data(), an) != 0)
    return ::testing::AssertionFailure() << "encode is not deterministic";

  Bytes msg(a.begin(), a.begin() + an);  // exact size: ASan catches any read past the message
  auto r = check_canonical(msg.data(), msg.size(), in, n);
  if (!r) return r;
  Header h;
  std::memcpy(&h, msg.data(), sizeof h);
  if (h.codec != uint8_t(c) && h.codec != uint8_t(Codec::Raw))
    return ::testing::AssertionFailure() << "message codec " << int(h.codec);
  // FORMAT.md: a raw message exactly when the coded one would be larger (or the input is shorter
  // than one element). Checked for the default ratio limit only.
  if (c != Codec::Raw && opt.max_ratio == 1.0) {
    const bool want_raw = n < elem_bytes(c) || coded_size(c, in, n) > max_compressed_bytes(n);
    if ((h.codec == uint8_t(Codec::Raw)) != want_raw)
      return ::testing::AssertionFailure() << "message codec " << int(h.codec) << " but coded size would be "
                                           << (n < elem_bytes(c) ? 0 : coded_size(c, in, n)) << " vs raw "
                                           << max_compressed_bytes(n);
  }
  if (bool(h.flags & kFlagChecksum) != opt.checksum) return ::testing::AssertionFailure() << "checksum flag";
  if (opt.checksum && h.checksum != crc32c(in, n)) return ::testing::AssertionFailure() << "stored checksum";
  size_t dn = 0;
  s = decoded_size(msg.data(), msg.size(), &dn);
  if (s != Status::kOk || dn != n) return ::testing::AssertionFailure() << "decoded_size " << dn << " " << status_string(s);

  Bytes out(n + kGuard, kGuardByte);
  size_t on = 0;
  s = decode(msg.data(), msg.size(), out.data(), n, &on);
  if (s != Status::kOk) return ::testing::AssertionFailure() << "decode: " << status_string(s);
  if (!guard_intact(out, n)) return ::testing::AssertionFailure() << "decode wrote past out_cap";
  if (on != n) return ::testing::AssertionFailure() << "decoded " << on << " bytes, want " << n;
  for (size_t i = 0; i < n; ++i)
    if (out[i] != in[i])
      return ::testing::AssertionFailure() << "byte " << i << " decoded as " << int(out[i]) << ", want " << int(in[i]);
  if (msg_out) *msg_out = std::move(msg);
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult round_trip(Codec c, const Bytes& in, Bytes* msg_out = nullptr,
                                             const EncodeOptions& opt = {}) {
  return round_trip(c, in.data(), in.size(), msg_out, opt);
}

// Codec stored in a message header.
inline Codec message_codec(const Bytes& msg) { return static_cast<Codec>(msg.at(5)); }

}  // namespace zipccl::test
