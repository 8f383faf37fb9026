// The measured rate of each plugin device's link, all its send comms together as they share the
// NIC: wire bytes per second of busy time, from when a message goes to the link until its send
// is seen complete. The policy trusts it over the speed a device reports when it is far higher (a
// loopback interface says 10 Gb/s and moves far more).
#pragma once

#include <cstdint>
#include <mutex>

#include "busy_rate.h"

namespace zipccl {

class LinkMeter {
 public:
  void started();
  void finished(uint64_t wire_bytes);
  double bytes_per_s() const { return rate_.bytes_per_s(); }

 private:
  std::mutex mu_;  // comms of several communicators (progress threads) share a device
  BusyRate rate_;
};

// Device dev's meter, for the life of the process.
LinkMeter* link_meter(int dev);

// The link rate to plan with: the measured one where it is over twice the reported speed (the
// device misreports it: a virtual interface such as lo says 10 Gb/s); short of that the reported
// speed, since sends complete into socket buffers in bursts above the line rate.
inline double planning_link_bps(double reported, const LinkMeter* meter) {
  const double measured = meter ? meter->bytes_per_s() : 0;
  return measured > 2 * reported ? measured : reported;
}

}  // namespace zipccl
