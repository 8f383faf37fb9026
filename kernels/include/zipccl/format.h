// The zipccl compressed-message format, version 1. docs/FORMAT.md is the contract; this header
// is its single source of truth in code and is shared by the CPU codec and the CUDA kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZIPCCL_HD __host__ __device__ __forceinline__
#else
#define ZIPCCL_HD inline
#endif

namespace zipccl {

enum class Codec : uint8_t { Raw = 0, BF16 = 1, FP16 = 2, FP32 = 3 };
constexpr int kNumCodecs = 4;

// Outcome of an encode or decode, on the CPU and on the GPU alike.
enum class Status : int {
  kOk = 0,
  kTruncated,      // input shorter than its header says
  kBadMagic,
  kBadVersion,
  kBadHeader,      // a header field is out of range or disagrees with the layout
  kBadBlock,       // a block-table entry is out of range or inconsistent
  kBadEscapes,     // escape count does not match the codes of the block
  kBadChecksum,
  kNoSpace,        // output capacity too small
  kTooLarge,       // input exceeds the format's limits
};


constexpr uint32_t kMagic = 0x4C43435Au;  // "ZCCL" in little-endian byte order
constexpr uint8_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 128;
constexpr uint32_t kAlign = 128;         // every section starts 128-byte aligned
constexpr uint32_t kBlockElems = 4096;   // elements per block (v1 accepts only this)
constexpr uint32_t kBlockEntryBytes = 8;
constexpr uint32_t kWindow = 7;          // codes 1..7 map to exponents base..base+6; 0 = escape
constexpr uint8_t kFlagChecksum = 0x1;
// A v1 message describes at most 2^32-1 elements (escape offsets are 32-bit).
constexpr uint64_t kMaxElems = 0xFFFFFFFFull;

enum BlockMode : uint8_t { kBlockCoded = 0, kBlockRaw = 1 };

ZIPCCL_HD uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Per-codec geometry. Each element splits into R "residual" bytes kept verbatim (sign+mantissa)
// and one 8-bit "top" symbol: the exponent (bf16, fp32) or, for fp16, exponent plus 3 bits that
// travel as extra bit-planes. K = bit-planes per element (3 code planes + extra planes).
struct CodecGeometry {
  uint32_t elem_bytes;   // 1 for raw
  uint32_t res_planes;   // R
  uint32_t bit_planes;   // K
  uint32_t exp_max;      // largest exponent value (255 or 31)
};

ZIPCCL_HD constexpr CodecGeometry geometry(Codec c) {
  switch (c) {
    case Codec::BF16: return {2, 1, 3, 255};
    case Codec::FP16: return {2, 1, 6, 31};
    case Codec::FP32: return {4, 3, 3, 255};
    default: return {1, 0, 0, 0};
  }
}

// Where each section of a message lives. Everything except the escape section's length follows
// from (codec, orig_bytes); the decoder recomputes it and requires the header to agree.
struct Layout {
  Codec codec;
  uint8_t tail_bytes;   // orig_bytes % elem_bytes, carried in the header
  CodecGeometry g;
  uint64_t orig_bytes;
  uint64_t n_elems;
  uint32_t n_blocks;
  uint64_t off_table;
  uint64_t off_res;
  uint64_t res_stride;  // bytes per residual byte-plane
  uint64_t off_bits;
  uint64_t bit_stride;  // bytes per bit-plane
  uint64_t off_esc;     // escape section start; for Raw, the payload start
};

ZIPCCL_HD Layout make_layout(Codec c, uint64_t orig_bytes) {
  Layout L{};
  L.codec = c;
  L.g = geometry(c);
  L.orig_bytes = orig_bytes;
  if (c == Codec::Raw) {
    L.off_table = L.off_res = L.off_bits = L.off_esc = kHeaderBytes;
    return L;
  }
  // elem_bytes is 2 or 4: shifts, so that GPU code needs no 64-bit division by a variable.
  L.n_elems = orig_bytes >> (L.g.elem_bytes / 2);
  L.tail_bytes = static_cast<uint8_t>(orig_bytes & (L.g.elem_bytes - 1));
  L.n_blocks = static_cast<uint32_t>((L.n_elems + kBlockElems - 1) / kBlockElems);
  L.off_table = kHeaderBytes;
  L.off_res = align_up(L.off_table + uint64_t(L.n_blocks) * kBlockEntryBytes, kAlign);
  L.res_stride = align_up(L.n_elems, kAlign);
  L.off_bits = L.off_res + L.g.res_planes * L.res_stride;
  L.bit_stride = align_up((L.n_elems + 7) / 8, kAlign);
  L.off_esc = L.off_bits + L.g.bit_planes * L.bit_stride;
  return L;
}

// Elements in block b (the last block may be partial).
ZIPCCL_HD uint32_t block_elems(const Layout& L, uint32_t b) {
  uint64_t start = uint64_t(b) * kBlockElems;
  uint64_t left = L.n_elems - start;
  return left < kBlockElems ? static_cast<uint32_t>(left) : kBlockElems;
}

// A raw block keeps its top bytes verbatim: the first min(nb, K*ceil(nb/8)) in the block's
// bit-plane slots (plane after plane), the rest in its escape chunk. So a raw block costs
// exactly its original size.
ZIPCCL_HD constexpr uint32_t raw_plane_bytes(uint32_t bit_planes, uint32_t nb) {
  const uint32_t in_planes = bit_planes * ((nb + 7) / 8);
  return in_planes < nb ? in_planes : nb;
}
ZIPCCL_HD constexpr uint32_t raw_chunk_bytes(uint32_t bit_planes, uint32_t nb) {
  return nb - raw_plane_bytes(bit_planes, nb);
}
ZIPCCL_HD uint32_t raw_plane_bytes(const Layout& L, uint32_t nb) { return raw_plane_bytes(L.g.bit_planes, nb); }
ZIPCCL_HD uint32_t raw_chunk_bytes(const Layout& L, uint32_t nb) { return raw_chunk_bytes(L.g.bit_planes, nb); }

// Header and block table, little-endian on the wire (all supported hosts and GPUs are).
struct Header {
  uint32_t magic;
  uint8_t version;
  uint8_t codec;
  uint8_t flags;
  uint8_t tail_bytes;
  uint64_t orig_bytes;
  uint64_t n_elems;
  uint32_t block_elems;
  uint32_t n_blocks;
  uint64_t total_bytes;
  uint64_t off_table;
  uint64_t off_res;
  uint64_t res_stride;
  uint64_t off_bits;
  uint64_t bit_stride;
  uint64_t off_esc;
  uint64_t esc_bytes;
  uint8_t tail[4];
  uint32_t checksum;    // CRC32C of the original bytes when flags has kFlagChecksum, else 0
  uint8_t reserved[24];
};
static_assert(sizeof(Header) == kHeaderBytes, "header is 128 bytes");

struct BlockEntry {
  uint32_t esc_offset;  // chunk start, relative to the escape section
  uint16_t esc_count;   // chunk length in bytes (escapes, or the raw block's spilled top bytes)
  uint8_t base;         // first exponent of the window (coded blocks)
  uint8_t mode;         // BlockMode
};
static_assert(sizeof(BlockEntry) == kBlockEntryBytes, "block entry is 8 bytes");

// The header of a message with layout L and esc_bytes of escape section. tail points at the
// input's tail_bytes trailing bytes.
ZIPCCL_HD Header make_header(const Layout& L, uint64_t esc_bytes, const uint8_t* tail, bool checksum,
                             uint32_t crc) {
  Header h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.codec = static_cast<uint8_t>(L.codec);
  h.flags = checksum ? kFlagChecksum : 0;
  h.tail_bytes = L.tail_bytes;
  h.orig_bytes = L.orig_bytes;
  h.n_elems = L.n_elems;
  h.block_elems = L.codec == Codec::Raw ? 0 : kBlockElems;
  h.n_blocks = L.n_blocks;
  h.total_bytes = L.off_esc + esc_bytes;
  h.off_table = L.off_table;
  h.off_res = L.off_res;
  h.res_stride = L.res_stride;
  h.off_bits = L.off_bits;
  h.bit_stride = L.bit_stride;
  h.off_esc = L.off_esc;
  h.esc_bytes = esc_bytes;
  for (uint32_t i = 0; i < L.tail_bytes; ++i) h.tail[i] = tail[i];
  h.checksum = checksum ? crc : 0;
  return h;
}

// Validate an untrusted header of a message of which in_bytes are available: every field must be
// what make_header() writes for the layout that (codec, orig_bytes) implies. On success *out is
// that layout. Shared by the CPU and GPU decoders, so both return the same status.
ZIPCCL_HD Status check_header(const Header& h, uint64_t in_bytes, Layout* out) {
  if (in_bytes < kHeaderBytes) return Status::kTruncated;
  if (h.magic != kMagic) return Status::kBadMagic;
  if (h.version != kVersion) return Status::kBadVersion;
  // Every other field error is kBadHeader: the conditions are independent and evaluated
  // together (no early exit), which shortens the GPU decoder's dependent chain. make_layout()
  // is well defined for any codec byte and size, valid or not.
  const Codec c = static_cast<Codec>(h.codec);
  const Layout L = make_layout(c, h.orig_bytes);
  uint64_t reserved[3];
  uint32_t tail;
  memcpy(reserved, h.reserved, sizeof reserved);
  memcpy(&tail, h.tail, sizeof tail);
  const uint32_t tail_extra = L.tail_bytes < 4 ? ~0u << (8 * L.tail_bytes) : 0;
  const uint32_t want_block = c == Codec::Raw ? 0 : kBlockElems;
  bool bad = h.codec >= kNumCodecs || (h.flags & ~kFlagChecksum);
  bad |= (reserved[0] | reserved[1] | reserved[2]) != 0;
  bad |= !(h.flags & kFlagChecksum) && h.checksum;
  bad |= c != Codec::Raw && (h.orig_bytes >> (geometry(c).elem_bytes / 2)) > kMaxElems;
  bad |= c == Codec::Raw && h.orig_bytes > (uint64_t(1) << 48);
  bad |= h.n_elems != L.n_elems || h.block_elems != want_block || h.n_blocks != L.n_blocks ||
         h.tail_bytes != L.tail_bytes || h.off_table != L.off_table || h.off_res != L.off_res ||
         h.res_stride != L.res_stride || h.off_bits != L.off_bits || h.bit_stride != L.bit_stride ||
         h.off_esc != L.off_esc;
  bad |= (tail & tail_extra) != 0;
  // Each element contributes at most one byte to the escape section; raw payload is all of it.
  bad |= c == Codec::Raw ? h.esc_bytes != h.orig_bytes : h.esc_bytes > L.n_elems;
  bad |= h.total_bytes != L.off_esc + h.esc_bytes;
  if (bad) return Status::kBadHeader;
  if (h.total_bytes > in_bytes) return Status::kTruncated;
  *out = L;
  return Status::kOk;
}

// What the GPU decoder's data tiles need of a coded header's claimed layout, which they decode
// from while the checker tile runs check_header() (decode.cu): every section offset and stride
// kAlign-aligned and at most in_bytes, the escape section ending within in_bytes, the blocks
// covering n_elems exactly, and n_elems elements of elem_bytes fitting in out_cap. Every header
// that check_header() accepts for in_bytes, with orig_bytes <= out_cap, satisfies it (tested):
// the tiles refuse only headers the checker refuses too.
ZIPCCL_HD bool claimed_layout_in_bounds(const Header& h, uint32_t elem_bytes, uint64_t in_bytes, uint64_t out_cap) {
  return h.n_elems <= in_bytes && h.off_res <= in_bytes && h.res_stride <= in_bytes && h.off_bits <= in_bytes &&
         h.bit_stride <= in_bytes && h.off_esc <= in_bytes &&
         ((h.off_res | h.res_stride | h.off_bits | h.bit_stride) & (kAlign - 1)) == 0 &&
         h.esc_bytes <= in_bytes - h.off_esc && h.n_elems <= out_cap / elem_bytes &&
         uint64_t(h.n_blocks) == (h.n_elems + kBlockElems - 1) / kBlockElems;
}

// Largest coded message an encoder keeps for an input of n bytes under a caller's ratio limit
// (clamped to [0, 1]; NaN counts as 0); anything larger goes out as a Raw message.
inline uint64_t coded_limit(uint64_t n, double max_ratio) {
  const double r = max_ratio >= 0 ? (max_ratio < 1 ? max_ratio : 1) : 0;
  const uint64_t lim = uint64_t(r * double(n)) + kHeaderBytes;
  return lim < n + kHeaderBytes ? lim : n + kHeaderBytes;
}

// Worst case of any encoder output for an input of n bytes: the raw fallback.
ZIPCCL_HD uint64_t max_compressed_bytes(uint64_t n) { return kHeaderBytes + n; }

// ---- Element split/join: the bit-exact definition of residuals, top symbols and extra bits ----

// Exponent field of an element given as its raw bits.
ZIPCCL_HD uint32_t elem_exponent(Codec c, uint32_t v) {
  switch (c) {
    case Codec::BF16: return (v >> 7) & 0xFF;
    case Codec::FP16: return (v >> 10) & 0x1F;
    default: return (v >> 23) & 0xFF;
  }
}

// Residual byte r (0..R-1).
ZIPCCL_HD uint8_t elem_residual(Codec c, uint32_t v, int r) {
  switch (c) {
    case Codec::BF16: return static_cast<uint8_t>(((v >> 8) & 0x80) | (v & 0x7F));
    case Codec::FP16: return static_cast<uint8_t>(v & 0xFF);
    default:
      if (r == 0) return static_cast<uint8_t>(v & 0xFF);
      if (r == 1) return static_cast<uint8_t>((v >> 8) & 0xFF);
      return static_cast<uint8_t>(((v >> 16) & 0x7F) | ((v >> 24) & 0x80));
  }
}

// fp16 only: bits m8, m9, sign as a 3-bit value (bit-planes 3, 4, 5).
ZIPCCL_HD uint32_t fp16_extra(uint32_t v) { return ((v >> 8) & 0x3) | ((v >> 13) & 0x4); }

// The top byte that a raw block stores verbatim.
ZIPCCL_HD uint8_t elem_top(Codec c, uint32_t v) {
  return c == Codec::FP16 ? static_cast<uint8_t>(v >> 8) : static_cast<uint8_t>(elem_exponent(c, v));
}

// Rebuild an element from its exponent, residual bytes and (fp16) extra bits.
ZIPCCL_HD uint32_t elem_join(Codec c, uint32_t e, const uint8_t* res, uint32_t extra) {
  switch (c) {
    case Codec::BF16: return (uint32_t(res[0] & 0x80) << 8) | (e << 7) | (res[0] & 0x7F);
    case Codec::FP16: return ((extra & 0x4) << 13) | (e << 10) | ((extra & 0x3) << 8) | res[0];
    default:
      return (uint32_t(res[2] & 0x80) << 24) | (e << 23) | (uint32_t(res[2] & 0x7F) << 16) |
             (uint32_t(res[1]) << 8) | res[0];
  }
}

// Rebuild an element of a raw block from its top byte and residual bytes.
ZIPCCL_HD uint32_t elem_join_top(Codec c, uint32_t top, const uint8_t* res) {
  if (c == Codec::FP16) return (top << 8) | res[0];
  return elem_join(c, top, res, 0);
}

// ---- The window: chosen from a cheap statistic, the mean exponent of the block's nonzero
// exponents. For x ~ N(0, s^2), E[floor(log2|x|)] = log2 s - 1.416, so the spec's
// base = 122 + floor(log2 s + 0.283) becomes base = floor(mean_exp - 3.301) for bf16/fp32
// (bias-relative, so the same for fp16). Integer arithmetic only: GPU and CPU agree exactly.
constexpr int64_t kWindowOffsetQ10 = 3380;  // 3.301 * 1024

ZIPCCL_HD uint32_t window_base(Codec c, uint64_t exp_sum, uint32_t exp_count) {
  const int64_t max_base = int64_t(geometry(c).exp_max) - (kWindow - 1);
  if (exp_count == 0) return 0;  // only zeros/denormals: window [0, 6] codes them
  int64_t num = int64_t(exp_sum) * 1024 - kWindowOffsetQ10 * int64_t(exp_count);
  if (num < 0) return 0;
  int64_t base = num / (int64_t(exp_count) * 1024);
  return static_cast<uint32_t>(base > max_base ? max_base : base);
}

// The encoders' base: window_base() moved by one where that codes more of the block, i.e. the
// fewest escapes among base - 1, base and base + 1 (ties keep base, then base - 1). Heavy-tailed
// blocks (gradients) sit about one exponent above the Gaussian rule. down and up: the escapes
// that moving the window down or up by one adds (negative: removes), i.e. over the block's
// exponents e, the count of e == base + 6 minus that of e == base - 1, and the count of
// e == base minus that of e == base + 7.
ZIPCCL_HD uint32_t refine_window_base(Codec c, uint32_t base, int32_t down, int32_t up) {
  const uint32_t max_base = geometry(c).exp_max - (kWindow - 1);
  if (base == 0) down = 0;
  if (base >= max_base) up = 0;
  if (down < 0 && down <= up) return base - 1;
  if (up < 0) return base + 1;
  return base;
}

// Code of exponent e under window base: 1..7 inside the window, 0 (escape) outside.
ZIPCCL_HD uint32_t exp_code(uint32_t e, uint32_t base) {
  uint32_t d = e - base;  // wraps for e < base
  return d < kWindow ? d + 1 : 0;
}

}  // namespace zipccl
