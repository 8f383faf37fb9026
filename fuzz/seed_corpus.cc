// Writes the fuzzers' seed corpora: <dir>/decode_fuzzer/ gets small valid messages of every
// codec (coded blocks with escapes, raw blocks, tails, checksums, raw fallbacks),
// <dir>/roundtrip_fuzzer/ typed and random inputs behind the fuzzer's 2-byte prefix, and
// <dir>/socket_link_fuzzer/ a valid peer's streams: headers with their payloads (raw and
// compressed) to a receiving link, clear-to-sends to a sending one.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "socket_wire.h"
#include "zipccl/codec.h"

namespace {

using Bytes = std::vector<uint8_t>;
using zipccl::Codec;

// n elements of N(0, 1) in the codec's type; every 16th is an exact zero and the last `wild`
// elements have random bits (their exponents escape, forcing a raw block when enough).
Bytes make_input(Codec c, size_t n, size_t wild, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const uint32_t eb = zipccl::geometry(c).elem_bytes;
  Bytes b(n * eb);
  for (size_t i = 0; i < n; ++i) {
    float f = i % 16 ? d(g) : 0.0f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (c == Codec::BF16) u >>= 16;
    if (c == Codec::FP16) {  // round toward zero; tiny values flush to zero
      const int e = int((u >> 23) & 0xFF) - 112;
      u = ((u >> 16) & 0x8000) | (e <= 0 ? 0 : e >= 31 ? 0x7C00 : (uint32_t(e) << 10) | ((u >> 13) & 0x3FF));
    }
    if (i + wild >= n) u = g();
    std::memcpy(b.data() + i * eb, &u, eb);
  }
  return b;
}

bool write_file(const std::string& path, const Bytes& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

// One input of socket_link_fuzzer: the side (0 receiver, 1 sender), the control stream's length,
// the control stream (length-prefixed records), the payload stream.
Bytes socket_input(uint8_t side, const Bytes& ctrl, const Bytes& payload) {
  Bytes b = {side, uint8_t(ctrl.size()), uint8_t(ctrl.size() >> 8)};
  b.insert(b.end(), ctrl.begin(), ctrl.end());
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

template <class Record>
void append_record(Bytes* to, const Record& r, const Bytes& payload = {}) {
  const uint32_t len = uint32_t(sizeof r + payload.size());
  const uint8_t* l = reinterpret_cast<const uint8_t*>(&len);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&r);
  to->insert(to->end(), l, l + 4);
  to->insert(to->end(), p, p + sizeof r);
  to->insert(to->end(), payload.begin(), payload.end());
}

bool write_socket_seeds(const std::string& dir) {
  using namespace zipccl::tcp;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  const Bytes raw = make_input(Codec::BF16, 500, 0, 7);  // 1000 bytes
  Bytes msg(zipccl::max_compressed_bytes(raw.size()));
  size_t n = 0;
  if (zipccl::encode(Codec::BF16, raw.data(), raw.size(), msg.data(), msg.size(), &n) != zipccl::Status::kOk) return false;
  msg.resize(n);
  Bytes ctrl;
  append_record(&ctrl, HeaderRecord{kHeader, 0, 0, 0, raw.size(), raw.size()});
  bool ok = write_file(dir + "/receive_raw", socket_input(0, ctrl, raw));
  ctrl.clear();
  append_record(&ctrl, HeaderRecord{kHeader, 0, 0, kCompressed, raw.size(), msg.size()});
  ok = ok && write_file(dir + "/receive_compressed", socket_input(0, ctrl, msg));
  // A raw message inside its header record: in its place, and sent ahead of its clear-to-send
  // (message 0, the posted receive's tag).
  ctrl.clear();
  append_record(&ctrl, HeaderRecord{kHeader, 0, 0, kInline, raw.size(), raw.size()}, raw);
  ok = ok && write_file(dir + "/receive_inline", socket_input(0, ctrl, {}));
  ctrl.clear();
  append_record(&ctrl, HeaderRecord{kHeader, 0, 7, kInline | kEager, raw.size(), raw.size()}, raw);
  ok = ok && write_file(dir + "/receive_eager", socket_input(0, ctrl, {}));
  // Pushed to a receiver that lets its sender push (side bit 1): its bytes on the data socket.
  ctrl.clear();
  append_record(&ctrl, HeaderRecord{kHeader, 0, 7, kEager | kPushed, raw.size(), raw.size()});
  ok = ok && write_file(dir + "/receive_pushed", socket_input(2, ctrl, raw));
  CtsRecord cts{};
  cts.type = kCts;
  cts.n = 2;
  cts.e[0] = CtsEntry{7, kCompressOk, 4096, 0, 0, 0, 0, 8192};
  cts.e[1] = CtsEntry{8, 0, 100, 0, 0, 0, 0, 0};
  ctrl.clear();
  append_record(&ctrl, cts);
  cts.seq = 1;
  cts.n = 1;
  cts.first = 2;
  append_record(&ctrl, cts);
  ok = ok && write_file(dir + "/send_two_cts", socket_input(1, ctrl, {}));
  // The receiver says push from placement 3, then offers staging again at receive 5, placement 6.
  append_record(&ctrl, PushRecord{kPush, 3, 0, 0});
  cts.seq = 5;
  cts.first = 6;
  append_record(&ctrl, cts);
  ok = ok && write_file(dir + "/send_push_then_cts", socket_input(1, ctrl, {}));
  // A bounded push (a quiet gate between probes), moved on once.
  ctrl.clear();
  append_record(&ctrl, PushRecord{kPush, 0, 2, kPushBounded});
  append_record(&ctrl, PushRecord{kPush, 0, 5, kPushBounded});
  ok = ok && write_file(dir + "/send_bounded_push", socket_input(1, ctrl, {}));
  return ok;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1], dec = dir + "/decode_fuzzer", rt = dir + "/roundtrip_fuzzer";
  for (const std::string& d : {dir, dec, rt})
    if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      std::perror(d.c_str());
      return 1;
    }
  struct Shape {
    size_t elems, wild, tail;
  } shapes[] = {{0, 0, 1}, {3, 0, 1}, {200, 0, 0}, {1000, 40, 1}, {4096 + 700, 700, 3}, {300, 300, 0}};
  int files = 0;
  for (Codec c : {Codec::Raw, Codec::BF16, Codec::FP16, Codec::FP32}) {
    const Codec type = c == Codec::Raw ? Codec::BF16 : c;
    for (const Shape& s : shapes) {
      Bytes in = make_input(type, s.elems, s.wild, uint32_t(files));
      in.resize(in.size() + s.tail % zipccl::geometry(type).elem_bytes, 0x5A);
      for (bool crc : {false, true}) {
        zipccl::EncodeOptions opt;
        opt.checksum = crc;
        Bytes msg(zipccl::max_compressed_bytes(in.size()));
        size_t n = 0;
        if (zipccl::encode(c, in.data(), in.size(), msg.data(), msg.size(), &n, opt) != zipccl::Status::kOk) {
          std::fprintf(stderr, "encode failed\n");
          return 1;
        }
        msg.resize(n);
        const std::string name = std::string(zipccl::codec_name(c)) + "_" + std::to_string(in.size()) +
                                 (crc ? "_crc" : "");
        // Roundtrip prefix: codec, checksum flag, max_ratio 1.0 (16/16); aligned buffers.
        Bytes rt_in = {uint8_t(uint8_t(c) | (crc ? 4 : 0) | (16 << 3)), 0};
        rt_in.insert(rt_in.end(), in.begin(), in.end());
        if (!write_file(dec + "/" + name, msg) || !write_file(rt + "/" + name, rt_in)) {
          std::perror(name.c_str());
          return 1;
        }
        ++files;
      }
    }
  }
  std::printf("wrote %d seeds to each of %s and %s\n", files, dec.c_str(), rt.c_str());
  return write_socket_seeds(dir + "/socket_link_fuzzer") ? 0 : 1;
}
