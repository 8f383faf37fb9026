// CPU reference encoder. Blocks are independent; the only serial state is the running escape
// offset, which the GPU encoder replaces by a scan.
#include <algorithm>
#include <cstring>

#include "elements.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace {

void write_header(uint8_t* out, const Layout& L, uint64_t esc_bytes, const uint8_t* tail,
                  bool checksum, uint32_t crc) {
  const Header h = make_header(L, esc_bytes, tail, checksum, crc);
  std::memcpy(out, &h, sizeof h);
}

Status encode_raw(const uint8_t* in, size_t n, uint8_t* out, size_t cap, size_t* out_bytes,
                  const EncodeOptions& opt) {
  if (cap < kHeaderBytes + n) return Status::kNoSpace;
  Layout L = make_layout(Codec::Raw, n);
  if (n) std::memmove(out + kHeaderBytes, in, n);  // an empty input may be a null pointer
  write_header(out, L, n, in, opt.checksum, opt.checksum ? crc32c(in, n) : 0);
  *out_bytes = kHeaderBytes + n;
  return Status::kOk;
}

// Code one block, given its exponents: residual bytes, bit-planes and escape chunk. Always
// inlined, so it is compiled for the ISA of each clone of encode_blocks().
template <Codec C>
[[gnu::always_inline]] inline void encode_block(const Layout& L, const uint8_t* in, uint8_t* out, uint32_t b, const uint8_t* exps,
                  const cpu::BlockPlan& p, uint8_t* chunk) {
  const CodecGeometry G = geometry(C);  // folds to constants: C is a template argument
  const uint64_t first = uint64_t(b) * kBlockElems;
  const uint32_t nb = block_elems(L, b);
  const uint32_t groups = (nb + 7) / 8;
  const uint8_t* src = in + first * G.elem_bytes;
  uint8_t* planes = out + L.off_bits + first / 8;

  // One pass per residual plane keeps each loop a plain vectorizable map.
  for (uint32_t r = 0; r < G.res_planes; ++r) {
    uint8_t* res = out + L.off_res + r * L.res_stride + first;
    for (uint32_t i = 0; i < nb; ++i) res[i] = elem_residual(C, cpu::load<C>(src, i), r);
  }

  if (p.raw) {
    const uint32_t in_planes = raw_plane_bytes(L, nb);
    for (uint32_t k = 0; k < G.bit_planes; ++k) std::memset(planes + k * L.bit_stride, 0, groups);
    for (uint32_t i = 0; i < nb; ++i) {
      uint8_t top = elem_top(C, cpu::load<C>(src, i));
      if (i < in_planes)
        planes[(i / groups) * L.bit_stride + i % groups] = top;
      else
        chunk[i - in_planes] = top;
    }
    return;
  }

  // Symbols (3-bit code, plus fp16's extra bits above it), zero-padded to whole groups of 8.
  uint8_t syms[kBlockElems];
  const uint8_t base = static_cast<uint8_t>(p.base);
  for (uint32_t i = 0; i < nb; ++i) {
    uint32_t sym = cpu::exp_code8(exps[i], base);
    if (C == Codec::FP16) sym |= fp16_extra(cpu::load<C>(src, i)) << 3;
    syms[i] = static_cast<uint8_t>(sym);
  }
  std::memset(syms + nb, 0, groups * 8 - nb);

  const uint64_t stride = L.bit_stride;  // a local: the byte stores below may alias L
  cpu::pack_planes(syms, groups, G.bit_planes, planes, stride);

  // Escaped exponents, in element order, 64 elements at a time.
  uint32_t esc = 0;
  for (uint32_t gi = 0; gi < groups; gi += 8)
    for (uint64_t m = cpu::escape_word(planes, stride, gi, nb); m; m &= m - 1)
      chunk[esc++] = exps[gi * 8 + __builtin_ctzll(m)];
}

// Plan and code every block. False when the message would exceed `limit` (coding does not pay).
template <Codec C>
ZIPCCL_CPU_CLONES bool encode_blocks(const Layout& L, const uint8_t* in, uint8_t* out, uint64_t limit, uint64_t* esc_bytes) {
  uint64_t esc_off = 0;
  uint8_t exps[kBlockElems];
  for (uint32_t b = 0; b < L.n_blocks; ++b) {
    const uint32_t nb = block_elems(L, b);
    cpu::load_exponents<C>(in + uint64_t(b) * kBlockElems * geometry(C).elem_bytes, nb, exps);
    const cpu::BlockPlan p = cpu::plan_exponents(L, exps, nb, true);
    if (L.off_esc + esc_off + p.chunk_bytes > limit) return false;
    BlockEntry e{static_cast<uint32_t>(esc_off), static_cast<uint16_t>(p.chunk_bytes),
                 static_cast<uint8_t>(p.raw ? 0 : p.base), p.raw ? kBlockRaw : kBlockCoded};
    std::memcpy(out + L.off_table + uint64_t(b) * kBlockEntryBytes, &e, sizeof e);
    encode_block<C>(L, in, out, b, exps, p, out + L.off_esc + esc_off);
    esc_off += p.chunk_bytes;
  }
  *esc_bytes = esc_off;
  return true;
}

}  // namespace

Status encode(Codec c, const void* in_v, size_t n, void* out_v, size_t cap, size_t* out_bytes,
              const EncodeOptions& opt) {
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  if (c != Codec::Raw && n / geometry(c).elem_bytes > kMaxElems) return Status::kTooLarge;
  if (c == Codec::Raw || n < geometry(c).elem_bytes) return encode_raw(in, n, out, cap, out_bytes, opt);

  const Layout L = make_layout(c, n);
  const uint64_t limit = coded_limit(n, opt.max_ratio);
  if (L.off_esc > limit || L.off_esc > cap) return encode_raw(in, n, out, cap, out_bytes, opt);

  // Zero the fixed sections' padding so output bytes are fully determined by the input.
  std::memset(out + L.off_table + uint64_t(L.n_blocks) * kBlockEntryBytes, 0,
              L.off_res - L.off_table - uint64_t(L.n_blocks) * kBlockEntryBytes);
  for (uint32_t r = 0; r < L.g.res_planes; ++r)
    std::memset(out + L.off_res + r * L.res_stride + L.n_elems, 0, L.res_stride - L.n_elems);
  const uint64_t plane_used = (L.n_elems + 7) / 8;
  for (uint32_t k = 0; k < L.g.bit_planes; ++k)
    std::memset(out + L.off_bits + k * L.bit_stride + plane_used, 0, L.bit_stride - plane_used);

  uint64_t esc_off = 0;
  const uint64_t fit = std::min<uint64_t>(limit, cap);
  if (!cpu::with_codec(c, [&](auto tag) { return encode_blocks<decltype(tag)::value>(L, in, out, fit, &esc_off); }))
    return encode_raw(in, n, out, cap, out_bytes, opt);
  write_header(out, L, esc_off, in + L.n_elems * L.g.elem_bytes, opt.checksum,
               opt.checksum ? crc32c(in, n) : 0);
  *out_bytes = L.off_esc + esc_off;
  return Status::kOk;
}

}  // namespace zipccl
