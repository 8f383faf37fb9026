// The one clock of the plugin: steady (CLOCK_MONOTONIC on Linux, so also one time base for every
// process of a machine, which NCCL_ZIP_TIMELINE files rely on), in nanoseconds or milliseconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace zipccl {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline int64_t now_ms() { return now_ns() / 1000000; }

}  // namespace zipccl
