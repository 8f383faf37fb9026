// One per NCCL communicator (v11 init), or one for the process (v8-v10, which have no context):
// what NCCL tells the plugin about the communicator, and its traffic totals.
#pragma once

#include <atomic>
#include <cstdint>

#include "stats.h"

namespace zipccl {

struct NetCtx {
  uint64_t comm_id = 0;
  int traffic_class = -1;  // v11 init config: the communicator's links' traffic class
  // v11 setNetAttr: the collective being progressed now uses LL or LL128 (NCCL polls flags in
  // the receive buffer), so its receives must not get compressed bytes.
  std::atomic<bool> attr_flag_polled{false};
  Stats totals;
};

}  // namespace zipccl
