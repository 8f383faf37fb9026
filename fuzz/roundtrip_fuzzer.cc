// libFuzzer target: encode arbitrary bytes with every codec and option, decode, compare.
// Input: byte 0 picks codec (bits 0-1), checksum (bit 2) and max_ratio (bits 3-7, in 1/16);
// byte 1 picks the input and output misalignment (low and high nibble); the rest is the data.
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

void round_trip(zipccl::Codec c, const zipccl::EncodeOptions& opt, const uint8_t* in, size_t n, size_t in_off,
                size_t out_off) {
  using namespace zipccl;
  std::vector<uint8_t> src(in_off + n);
  std::copy(in, in + n, src.begin() + in_off);
  const size_t cap = max_compressed_bytes(n);
  std::vector<uint8_t> msg(out_off + cap + kGuard, kGuardByte), again(cap, 0);
  size_t mn = 0, an = 0;
  require(encode(c, src.data() + in_off, n, msg.data() + out_off, cap, &mn, opt) == Status::kOk, "encode failed");
  require(guard_intact(msg, out_off + cap), "encode wrote past out_cap");
  require(mn <= cap, "message larger than max_compressed_bytes");
  require(encode(c, in, n, again.data(), cap, &an, opt) == Status::kOk && an == mn &&
              std::memcmp(again.data(), msg.data() + out_off, mn) == 0,
          "encode not deterministic");

  // Decode from an exact-size copy so that ASan sees any read past the message.
  const std::vector<uint8_t> m(msg.begin() + out_off, msg.begin() + out_off + mn);
  size_t orig = 0, on = 0;
  require(decoded_size(m.data(), mn, &orig) == Status::kOk && orig == n, "decoded_size");
  std::vector<uint8_t> out(in_off + n + kGuard, kGuardByte);
  require(decode(m.data(), mn, out.data() + in_off, n, &on) == Status::kOk, "decode failed");
  require(on == n && (n == 0 || std::memcmp(out.data() + in_off, in, n) == 0), "round trip differs");
  require(guard_intact(out, in_off + n), "decode wrote past out_cap");
  const std::vector<uint8_t> cut(m.begin(), m.end() - 1);
  require(decode(cut.data(), cut.size(), out.data(), n, &on) == Status::kTruncated, "truncated message accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zipccl;
  if (size < 2) return 0;
  EncodeOptions opt;
  opt.checksum = data[0] & 4;
  opt.max_ratio = (data[0] >> 3) / 16.0;
  const size_t in_off = data[1] & 15, out_off = data[1] >> 4;
  const uint8_t* in = data + 2;
  const size_t n = size - 2;
  round_trip(static_cast<Codec>(data[0] & 3), opt, in, n, in_off, out_off);
  const Codec guess = classify(in, n);
  require(static_cast<int>(guess) < kNumCodecs, "classify returned no codec");
  round_trip(guess, {}, in, n, 0, 0);
  return 0;
}
