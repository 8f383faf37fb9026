// Header validation and names: the decoder's first line of defence against untrusted input.
#include <cstring>

#include "zipccl/codec.h"

namespace zipccl {

const char* status_string(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kTruncated: return "message truncated";
    case Status::kBadMagic: return "bad magic (not a zipccl message)";
    case Status::kBadVersion: return "unsupported format version";
    case Status::kBadHeader: return "inconsistent header";
    case Status::kBadBlock: return "inconsistent block table";
    case Status::kBadEscapes: return "escape data does not match codes";
    case Status::kBadChecksum: return "checksum mismatch";
    case Status::kNoSpace: return "output buffer too small";
    case Status::kTooLarge: return "input exceeds format limits";
  }
  return "unknown status";
}

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::Raw: return "raw";
    case Codec::BF16: return "bf16";
    case Codec::FP16: return "fp16";
    case Codec::FP32: return "fp32";
  }
  return "?";
}

Status parse_header(const void* in, size_t in_bytes, Layout* out, Header* hout) {
  if (in_bytes < kHeaderBytes) return Status::kTruncated;
  Header h;
  std::memcpy(&h, in, sizeof h);
  if (h.magic != kMagic) return Status::kBadMagic;
  if (h.version != kVersion) return Status::kBadVersion;
  if (h.codec >= kNumCodecs || (h.flags & ~kFlagChecksum)) return Status::kBadHeader;
  for (uint8_t r : h.reserved)
    if (r) return Status::kBadHeader;
  if (!(h.flags & kFlagChecksum) && h.checksum) return Status::kBadHeader;

  const Codec c = static_cast<Codec>(h.codec);
  const CodecGeometry g = geometry(c);
  if (c != Codec::Raw && h.orig_bytes / g.elem_bytes > kMaxElems) return Status::kBadHeader;
  if (c == Codec::Raw && h.orig_bytes > (uint64_t(1) << 48)) return Status::kBadHeader;
  const Layout L = make_layout(c, h.orig_bytes);

  const uint32_t want_block = c == Codec::Raw ? 0 : kBlockElems;
  if (h.n_elems != L.n_elems || h.block_elems != want_block || h.n_blocks != L.n_blocks ||
      h.tail_bytes != L.tail_bytes || h.off_table != L.off_table || h.off_res != L.off_res ||
      h.res_stride != L.res_stride || h.off_bits != L.off_bits || h.bit_stride != L.bit_stride ||
      h.off_esc != L.off_esc)
    return Status::kBadHeader;
  for (uint32_t i = L.tail_bytes; i < sizeof h.tail; ++i)
    if (h.tail[i]) return Status::kBadHeader;
  // Each element contributes at most one byte to the escape section; raw payload is all of it.
  if (c == Codec::Raw ? h.esc_bytes != h.orig_bytes : h.esc_bytes > L.n_elems)
    return Status::kBadHeader;
  if (h.total_bytes != L.off_esc + h.esc_bytes) return Status::kBadHeader;
  if (h.total_bytes > in_bytes) return Status::kTruncated;
  *out = L;
  if (hout) *hout = h;
  return Status::kOk;
}

Status decoded_size(const void* in, size_t in_bytes, size_t* orig_bytes) {
  Layout L;
  Status s = parse_header(in, in_bytes, &L, nullptr);
  if (s == Status::kOk) *orig_bytes = L.orig_bytes;
  return s;
}

}  // namespace zipccl
