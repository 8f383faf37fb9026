// Byte and time counters of a connection, folded into its communicator's totals at close and
// logged as one summary line each.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace zipccl {

struct Stats {
  std::atomic<uint64_t> messages{0};
  std::atomic<uint64_t> compressed{0};  // messages that went compressed
  std::atomic<uint64_t> bytes_in{0};    // uncompressed payload bytes (what NCCL asked to move)
  std::atomic<uint64_t> bytes_wire{0};  // payload bytes actually sent/received
  std::atomic<uint64_t> codec_ns{0};    // time spent in the codec for this connection
  std::atomic<uint64_t> gpu_coded{0};   // of the codec's jobs, those the resident GPU codec ran

  void add(const Stats& o) {
    messages += o.messages.load();
    compressed += o.compressed.load();
    bytes_in += o.bytes_in.load();
    bytes_wire += o.bytes_wire.load();
    codec_ns += o.codec_ns.load();
    gpu_coded += o.gpu_coded.load();
  }

  std::string summary() const {
    const double in = double(bytes_in.load()), wire = double(bytes_wire.load());
    char buf[256];
    snprintf(buf, sizeof buf,
             "%llu messages (%llu compressed), %.3f MB in, %.3f MB on the wire, ratio %.3f, codec %.3f s, "
             "%llu codec jobs on the GPU",
             (unsigned long long)messages.load(), (unsigned long long)compressed.load(), in / 1e6,
             wire / 1e6, in > 0 ? wire / in : 1.0, double(codec_ns.load()) / 1e9,
             (unsigned long long)gpu_coded.load());
    return buf;
  }
};

}  // namespace zipccl
