// libFuzzer target: parse_header, decoded_size and decode on arbitrary bytes. Beyond "no crash"
// (ASan/UBSan catch over-reads and UB), it checks the decoder's promises: it never writes past
// out_cap, a success returns exactly the header's length and a matching checksum, and the
// decoded bytes survive a fresh encode/decode.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "checks.h"
#include "zipccl/codec.h"

namespace {

using fuzz::guard_intact;
using fuzz::kGuard;
using fuzz::kGuardByte;
using fuzz::require;

// Most mutations of a message break its header and stop at parse_header. To reach the block
// table and body as well, the header is also rewritten to agree with the layout that its codec
// and orig_bytes imply (esc_bytes = what follows off_esc). Empty when no such header fits.
std::vector<uint8_t> repair_header(const uint8_t* data, size_t size) {
  using namespace zipccl;
  if (size < kHeaderBytes) return {};
  Header h;
  std::memcpy(&h, data, sizeof h);
  const Codec c = static_cast<Codec>(h.codec % kNumCodecs);
  const uint64_t orig = c == Codec::Raw ? size - kHeaderBytes : h.orig_bytes % (2 * size + 4);
  const Layout L = make_layout(c, orig);
  if (L.off_esc > size) return {};
  const uint64_t esc = c == Codec::Raw ? orig : std::min<uint64_t>(size - L.off_esc, L.n_elems);
  const Header r = make_header(L, esc, h.tail, h.flags & kFlagChecksum, h.checksum);
  std::vector<uint8_t> m(data, data + r.total_bytes);
  std::memcpy(m.data(), &r, sizeof r);
  return m;
}

// All checks on one candidate message.
void check_message(const uint8_t* data, size_t size) {
  using namespace zipccl;
  Layout L;
  Header h;
  const Status ps = parse_header(data, size, &L, &h);
  size_t orig = 0;
  require(decoded_size(data, size, &orig) == ps, "decoded_size disagrees with parse_header");

  // A valid header bounds orig_bytes by about twice the message size, so this stays small.
  const size_t cap = ps == Status::kOk ? orig : 256;
  std::vector<uint8_t> out(cap + kGuard, kGuardByte);
  size_t on = 0;
  const Status s = decode(data, size, out.data(), cap, &on);
  require(guard_intact(out, cap), "decode wrote past out_cap");
  if (ps != Status::kOk) {
    require(s == ps, "decode accepted or misreported a header that parse_header rejects");
    return;
  }
  if (orig > 0) {
    std::vector<uint8_t> small(orig - 1 + kGuard, kGuardByte);
    require(decode(data, size, small.data(), orig - 1, &on) == Status::kNoSpace, "decode into a short buffer");
    require(guard_intact(small, orig - 1), "decode wrote past a short out_cap");
  }
  if (s != Status::kOk) return;

  require(on == orig, "decoded length differs from the header's");
  if (h.flags & kFlagChecksum) require(crc32c(out.data(), orig) == h.checksum, "checksum not enforced");
  const Codec c = static_cast<Codec>(h.codec);
  std::vector<uint8_t> msg(max_compressed_bytes(orig)), back(orig);
  size_t mn = 0, bn = 0;
  require(encode(c, out.data(), orig, msg.data(), msg.size(), &mn) == Status::kOk, "re-encode failed");
  require(decode(msg.data(), mn, back.data(), orig, &bn) == Status::kOk && bn == orig, "re-decode failed");
  require(orig == 0 || std::memcmp(back.data(), out.data(), orig) == 0, "re-encoded data differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_message(data, size);
  const std::vector<uint8_t> repaired = repair_header(data, size);
  if (!repaired.empty()) {
    zipccl::Layout L;
    require(zipccl::parse_header(repaired.data(), repaired.size(), &L, nullptr) == zipccl::Status::kOk,
            "parse_header rejects a header that agrees with its layout");
    check_message(repaired.data(), repaired.size());
  }
  return 0;
}
