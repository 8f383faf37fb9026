// Wire bytes each plugin device's send comms have handed, or are about to hand, to its link and
// that have not gone through yet: a raw message's from its post, a compressed one's at the ratio
// expected from the moment it is sent to the codec (its encoded size once known). Divided by the
// link's rate: how long the link stays busy with what it already has (CompressPolicy weighs a
// codec queue against it). One counter per device, all comms of the process together, as they
// share the NIC (a socket device's NCCL_ZIP_SOCKET_PACE_MBPS pacer too).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "per_device.h"

namespace zipccl {

class LinkBacklog {
 public:
  void add(int64_t wire_bytes) { bytes_.fetch_add(wire_bytes, std::memory_order_relaxed); }
  int64_t bytes() const { return std::max<int64_t>(0, bytes_.load(std::memory_order_relaxed)); }

 private:
  std::atomic<int64_t> bytes_{0};
};

// Device dev's backlog, for the life of the process.
inline LinkBacklog* link_backlog(int dev) { return per_device<LinkBacklog>(dev); }

}  // namespace zipccl
