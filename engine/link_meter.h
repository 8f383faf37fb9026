// The measured rate of each plugin device's link, all its send comms together as they share the
// NIC: wire bytes per second of busy time, the union of the messages' spans from when each went
// to the link until the transport's threads saw its last piece through (not when NCCL tested it:
// NCCL's proxy tests many sends at once, which would read as a burst far above the line rate).
// The policy trusts it over the speed a device reports when it is far higher (a loopback
// interface says 10 Gb/s and moves far more).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace zipccl {

class LinkMeter {
 public:
  static constexpr double kWindowBytes = 4 << 20;

  // One message: on the link from start_ns to end_ns (the clock of now_ns), wire_bytes moved.
  // Spans come in the order NCCL tests them, which is the order of posting per comm but not
  // across comms: a span that starts before the busy time counted so far adds only what lies
  // beyond it.
  void add(int64_t start_ns, int64_t end_ns, uint64_t wire_bytes);
  // 0 until the first message; then a moving average over windows of at least kWindowBytes.
  double bytes_per_s() const { return rate_.load(std::memory_order_relaxed); }

 private:
  std::mutex mu_;  // comms of several communicators (progress threads) share a device
  int64_t covered_ns_ = 0;  // busy time is counted up to here
  int64_t busy_ns_ = 0;
  double bytes_ = 0;
  std::atomic<double> rate_{0};
};

// Device dev's meter, for the life of the process.
LinkMeter* link_meter(int dev);

// The link rate to plan with: the measured one where it is over twice the reported speed (the
// device misreports it: a virtual interface such as lo says 10 Gb/s); short of that the reported
// speed.
inline double planning_link_bps(double reported, const LinkMeter* meter) {
  const double measured = meter ? meter->bytes_per_s() : 0;
  return measured > 2 * reported ? measured : reported;
}

}  // namespace zipccl
