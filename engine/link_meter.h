// The measured rate of each plugin device's link, all its send comms together as they share the
// NIC: wire bytes per second of busy time, the union of the messages' spans from when the
// transport took each up until its threads saw its last piece through (not when NCCL tested it:
// NCCL's proxy tests many sends at once, which reads as a burst far above the line rate). The
// send comm decides which messages count (send_comm.cc). The policy plans with it only on a
// device that does not know its speed (planning_link_bps()).
//
// Spans arrive in the order NCCL tests them, which across comms is not the order they started,
// so time is closed kSettleNs behind the latest test: by then the spans that started before have
// been tested too (a span tested later counts only from where time was closed). Each closed
// stretch counts the union of the spans in it as busy time and each span's bytes in proportion
// to its time in it (spans overlap: NCCL keeps several messages of several channels on the link,
// and crediting a span's bytes to the stretch where it started, its time to where it ended, read
// a link that moved 0.45 GB/s as 4 GB/s at the end of a run). The rate: WindowedRate over
// kWindowBytes of stretches.
//
// A span ends when the transport handed its last piece on, not when it left the NIC: after an
// idle gap a buffer below (a socket's send buffer, NCCL_ZIP_SOCKET_PACE_MBPS's token bucket)
// takes a burst at memory speed, and busy time shrinks to the copy's. Over wall time the bytes
// cannot outrun the link, so a window's rate is at most link / busy share: the peak counts only
// windows busy for kPeakBusyShare of their wall time, which keeps it under 1.5x the link.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <queue>
#include <vector>

#include "per_device.h"
#include "windowed_rate.h"

namespace zipccl {

class LinkMeter {
 public:
  static constexpr double kWindowBytes = 32 << 20;
  static constexpr int64_t kSettleNs = 50 * 1000 * 1000;
  static constexpr double kPeakBusyShare = 2.0 / 3;

  // One message: on the link from start_ns to end_ns (now_ns's clock), wire_bytes moved; now_ns:
  // when it is added.
  void add(int64_t start_ns, int64_t end_ns, uint64_t wire_bytes, int64_t now_ns);
  void add(int64_t start_ns, int64_t end_ns, uint64_t wire_bytes);
  // 0 until a window's worth of spans has settled.
  double bytes_per_s() const { return rate_.bytes_per_s(); }
  // The highest rate of a window of kWindowBytes busy for kPeakBusyShare of its wall time so far:
  // what the link can move. The rate of the moment falls with the traffic (small messages move
  // a fraction of it while busy), the link does not.
  double peak_bytes_per_s() const { return peak_.load(std::memory_order_relaxed); }

 private:
  struct Span {
    int64_t start, end;
    uint64_t bytes;
    bool operator>(const Span& o) const { return start > o.start; }
  };
  // Counts [closed_ns_, to): its busy time and its share of the open spans' bytes.
  void close_until(int64_t to);

  std::mutex mu_;  // comms of several communicators (progress threads) share a device
  std::priority_queue<Span, std::vector<Span>, std::greater<Span>> settling_;  // earliest start first
  std::vector<Span> open_;  // settled spans that reach past closed_ns_, in start order
  int64_t closed_ns_ = -1;  // time before this is counted (-1: nothing settled yet)
  WindowedRate rate_{kWindowBytes, false};
  // The peak's window: bytes, busy ns, and its first and last busy moments.
  double window_bytes_ = 0, window_busy_ns_ = 0;
  int64_t window_from_ns_ = 0, window_to_ns_ = 0;
  std::atomic<double> peak_{0};
};

// Device dev's meter, for the life of the process.
inline LinkMeter* link_meter(int dev) { return per_device<LinkMeter>(dev); }
// The meter senders and receivers plan with on device dev: none where NCCL_ZIP_LINK_MBPS fixes
// the link's rate.
const LinkMeter* planning_meter(int dev);

// The link rate to plan with: the speed the device reports where it knows it (a NIC, an IB port, a
// paced socket device; NCCL_ZIP_LINK_MBPS). reported 0: it does not (a virtual interface such as
// lo, which moves 7-14 GB/s on an H200 host): the measured peak, and until there is one an
// infinitely fast link, so that nothing is compressed on a guess. The peak, not the rate of the
// moment, which falls in a phase of small collectives. Never the meter over a known speed: send
// spans end when the transport hands the last piece on, and on a socket device paced to 4 GB/s
// the peak read 12-61 GB/s, which turned auto mode off there.
inline double planning_link_bps(double reported, const LinkMeter* meter) {
  if (reported > 0) return reported;
  const double measured = meter ? meter->peak_bytes_per_s() : 0;
  return measured > 0 ? measured : std::numeric_limits<double>::infinity();
}

}  // namespace zipccl
