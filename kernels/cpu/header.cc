// Header parsing (validation is check_header() of format.h, shared with the GPU) and names.
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
  const Status s = check_header(h, in_bytes, out);
  if (s == Status::kOk && hout) *hout = h;
  return s;
}

Status decoded_size(const void* in, size_t in_bytes, size_t* orig_bytes) {
  Layout L;
  Status s = parse_header(in, in_bytes, &L, nullptr);
  if (s == Status::kOk) *orig_bytes = L.orig_bytes;
  return s;
}

}  // namespace zipccl
