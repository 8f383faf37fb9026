// CPU reference decoder. Input is untrusted: the header is validated against the layout it
// implies, every block entry is checked before its bytes are touched, and the escape chunks
// must tile the escape section exactly.
#include <algorithm>
#include <cstring>

#include "elements.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace {

// Positions in a group of 8 that hold an escape (code 0), limited to the valid elements.
inline uint32_t escape_mask(const uint8_t* planes, uint64_t stride, uint32_t gi, uint32_t lim) {
  uint32_t coded = planes[gi] | planes[stride + gi] | planes[2 * stride + gi];
  return ~coded & ((1u << lim) - 1);
}

Status decode_block(const Layout& L, const uint8_t* msg, const BlockEntry& e, uint32_t b, uint8_t* out) {
  const uint64_t first = uint64_t(b) * kBlockElems;
  const uint32_t nb = block_elems(L, b);
  const uint32_t groups = (nb + 7) / 8;
  const uint32_t R = L.g.res_planes, K = L.g.bit_planes;
  const uint8_t* res = msg + L.off_res;
  const uint8_t* planes = msg + L.off_bits + first / 8;
  const uint8_t* chunk = msg + L.off_esc + e.esc_offset;
  uint8_t rb[3] = {0, 0, 0};

  if (e.mode == kBlockRaw) {
    const uint32_t in_planes = raw_plane_bytes(L, nb);
    if (e.base != 0 || e.esc_count != nb - in_planes) return Status::kBadBlock;
    for (uint32_t i = 0; i < nb; ++i) {
      uint8_t top = i < in_planes ? planes[(i / groups) * L.bit_stride + i % groups] : chunk[i - in_planes];
      for (uint32_t r = 0; r < R; ++r) rb[r] = res[r * L.res_stride + first + i];
      cpu::store_elem(out, L.g.elem_bytes, first + i, elem_join_top(L.codec, top, rb));
    }
    return Status::kOk;
  }
  if (e.mode != kBlockCoded || e.base + kWindow - 1 > L.g.exp_max) return Status::kBadBlock;

  // The chunk length must equal the number of escape codes: checked before any chunk byte is read.
  uint32_t escapes = 0;
  for (uint32_t gi = 0; gi < groups; ++gi)
    escapes += __builtin_popcount(escape_mask(planes, L.bit_stride, gi, std::min<uint32_t>(8, nb - gi * 8)));
  if (escapes != e.esc_count) return Status::kBadEscapes;

  uint32_t k_esc = 0;
  for (uint32_t gi = 0; gi < groups; ++gi) {
    uint8_t bits[6];
    for (uint32_t k = 0; k < K; ++k) bits[k] = planes[k * L.bit_stride + gi];
    const uint32_t lim = std::min<uint32_t>(8, nb - gi * 8);
    for (uint32_t t = 0; t < lim; ++t) {
      uint32_t sym = 0;
      for (uint32_t k = 0; k < K; ++k) sym |= ((bits[k] >> t) & 1u) << k;
      const uint32_t code = sym & 7;
      uint32_t exp;
      if (code) {
        exp = e.base + code - 1;
      } else {
        exp = chunk[k_esc++];
        if (exp > L.g.exp_max) return Status::kBadEscapes;
      }
      const uint64_t i = first + gi * 8 + t;
      for (uint32_t r = 0; r < R; ++r) rb[r] = res[r * L.res_stride + i];
      cpu::store_elem(out, L.g.elem_bytes, i, elem_join(L.codec, exp, rb, sym >> 3));
    }
  }
  return Status::kOk;
}

}  // namespace

Status decode(const void* in_v, size_t in_bytes, void* out_v, size_t out_cap, size_t* out_bytes) {
  const auto* msg = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  Layout L;
  Header h;
  Status s = parse_header(msg, in_bytes, &L, &h);
  if (s != Status::kOk) return s;
  if (out_cap < L.orig_bytes) return Status::kNoSpace;

  if (L.codec == Codec::Raw) {
    std::memcpy(out, msg + kHeaderBytes, L.orig_bytes);
  } else {
    // Chunks must tile [0, esc_bytes) in block order: no gaps, no overlaps, nothing outside.
    uint64_t expect = 0;
    for (uint32_t b = 0; b < L.n_blocks; ++b) {
      BlockEntry e;
      std::memcpy(&e, msg + L.off_table + uint64_t(b) * kBlockEntryBytes, sizeof e);
      if (e.esc_offset != expect || expect + e.esc_count > h.esc_bytes) return Status::kBadBlock;
      expect += e.esc_count;
      s = decode_block(L, msg, e, b, out);
      if (s != Status::kOk) return s;
    }
    if (expect != h.esc_bytes) return Status::kBadBlock;
    std::memcpy(out + L.n_elems * L.g.elem_bytes, h.tail, L.tail_bytes);
  }
  if ((h.flags & kFlagChecksum) && crc32c(out, L.orig_bytes) != h.checksum) return Status::kBadChecksum;
  *out_bytes = L.orig_bytes;
  return Status::kOk;
}

}  // namespace zipccl
