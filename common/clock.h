// The one clock of the plugin: steady (CLOCK_MONOTONIC on Linux, so also one time base for every
// process of a machine, which NCCL_ZIP_TIMELINE files rely on), in nanoseconds or milliseconds.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace zipccl {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Milliseconds of the same clock as of the kernel's last tick (CLOCK_MONOTONIC_COARSE: a memory
// read, no clock source read, which in a VM can cost a large share of a busy poll). For deadlines
// and stall checks, which NCCL's progress thread makes on every poll; never behind by more than a tick.
inline int64_t now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return int64_t(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

}  // namespace zipccl
