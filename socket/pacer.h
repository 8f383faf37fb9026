// A cap on one device's send rate (NCCL_ZIP_SOCKET_PACE_MBPS), shared by the helper threads of
// every connection through it, as a NIC's line rate is: a token bucket refilled at the rate,
// holding at most half a millisecond of it (64 KiB at least). For benchmarks on loopback, which
// has no traffic shaping here: a slower NIC, emulated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace zipccl::tcp {

class Pacer {
 public:
  explicit Pacer(double bytes_per_s);
  // Bytes that may be sent now, at most `want`; 0 when none, and *wait_ns until some may be.
  size_t take(size_t want, int64_t* wait_ns);
  // A send moved fewer bytes than it took.
  void give_back(size_t unused);

 private:
  static constexpr double kMinGrant = 16384;
  void refill();
  std::mutex mu_;
  const double rate_;   // bytes per ns
  const double burst_;  // bytes
  double tokens_;
  int64_t last_ns_;
};

}  // namespace zipccl::tcp
