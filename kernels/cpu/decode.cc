// CPU reference decoder. Input is untrusted: the header is validated against the layout it
// implies, every block entry is checked before its bytes are touched, and the escape chunks
// must tile the escape section exactly.
#include <cstring>

#include "elements.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace {

template <Codec C>
ZIPCCL_CPU_CLONES Status decode_block(const Layout& L, const uint8_t* msg, const BlockEntry& e, uint32_t b, uint8_t* out) {
  const CodecGeometry G = geometry(C);  // folds to constants: C is a template argument
  const uint64_t first = uint64_t(b) * kBlockElems;
  const uint32_t nb = block_elems(L, b);
  const uint32_t groups = (nb + 7) / 8;
  const uint8_t* res = msg + L.off_res + first;
  const uint8_t* planes = msg + L.off_bits + first / 8;
  const uint8_t* chunk = msg + L.off_esc + e.esc_offset;
  uint8_t* dst = out + first * G.elem_bytes;
  uint8_t rb[3] = {0, 0, 0};

  if (e.mode == kBlockRaw) {
    const uint32_t in_planes = raw_plane_bytes(L, nb);
    if (e.base != 0 || e.esc_count != nb - in_planes) return Status::kBadBlock;
    for (uint32_t i = 0; i < nb; ++i) {
      uint8_t top = i < in_planes ? planes[(i / groups) * L.bit_stride + i % groups] : chunk[i - in_planes];
      for (uint32_t r = 0; r < G.res_planes; ++r) rb[r] = res[r * L.res_stride + i];
      cpu::store<C>(dst, i, elem_join_top(C, top, rb));
    }
    return Status::kOk;
  }
  if (e.mode != kBlockCoded || e.base + kWindow - 1 > G.exp_max) return Status::kBadBlock;

  // The chunk length must equal the number of escape codes: checked before any chunk byte is read.
  const uint64_t stride = L.bit_stride;
  uint32_t escapes = 0;
  for (uint32_t gi = 0; gi < groups; gi += 8) escapes += __builtin_popcountll(cpu::escape_word(planes, stride, gi, nb));
  if (escapes != e.esc_count) return Status::kBadEscapes;

  // Symbols: bit k of each element from plane k, 8 elements per plane byte.
  uint8_t syms[kBlockElems];
  for (uint32_t gi = 0; gi < groups; ++gi) {
    uint64_t x = 0;
    for (uint32_t k = 0; k < G.bit_planes; ++k) x |= cpu::kSpread.v[planes[k * stride + gi]] << k;
    std::memcpy(syms + gi * 8, &x, 8);
  }

  // Exponents from codes; escapes (code 0) are then filled in from the chunk, in order.
  uint8_t exps[kBlockElems];
  for (uint32_t i = 0; i < nb; ++i) exps[i] = static_cast<uint8_t>(e.base + (syms[i] & 7) - 1);
  uint32_t k_esc = 0;
  for (uint32_t gi = 0; gi < groups; gi += 8) {
    for (uint64_t m = cpu::escape_word(planes, stride, gi, nb); m; m &= m - 1) {
      const uint8_t exp = chunk[k_esc++];
      if (exp > G.exp_max) return Status::kBadEscapes;
      exps[gi * 8 + __builtin_ctzll(m)] = exp;
    }
  }

  // The stride in a local: otherwise the stores (which may alias L) force a reload per element
  // and the loop does not vectorize.
  const uint64_t res_stride = L.res_stride;
  for (uint32_t i = 0; i < nb; ++i) {
    for (uint32_t r = 0; r < G.res_planes; ++r) rb[r] = res[r * res_stride + i];
    cpu::store<C>(dst, i, elem_join(C, exps[i], rb, syms[i] >> 3));
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
    if (L.orig_bytes) std::memcpy(out, msg + kHeaderBytes, L.orig_bytes);  // out may be null when empty
  } else {
    // Chunks must tile [0, esc_bytes) in block order: no gaps, no overlaps, nothing outside.
    uint64_t expect = 0;
    for (uint32_t b = 0; b < L.n_blocks; ++b) {
      BlockEntry e;
      std::memcpy(&e, msg + L.off_table + uint64_t(b) * kBlockEntryBytes, sizeof e);
      if (e.esc_offset != expect || expect + e.esc_count > h.esc_bytes) return Status::kBadBlock;
      expect += e.esc_count;
      s = cpu::with_codec(L.codec, [&](auto tag) { return decode_block<decltype(tag)::value>(L, msg, e, b, out); });
      if (s != Status::kOk) return s;
    }
    if (expect != h.esc_bytes) return Status::kBadBlock;
    if (L.tail_bytes) std::memcpy(out + L.n_elems * L.g.elem_bytes, h.tail, L.tail_bytes);
  }
  if ((h.flags & kFlagChecksum) && crc32c(out, L.orig_bytes) != h.checksum) return Status::kBadChecksum;
  *out_bytes = L.orig_bytes;
  return Status::kOk;
}

}  // namespace zipccl
