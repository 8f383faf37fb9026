// What every exported entry point (the net tables' and the tuner's) runs its body through: an
// exception (an allocation that failed, ...) becomes an error NCCL sees, since nothing may unwind
// into NCCL. Out of memory is said at most once a second.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <new>

#include "clock.h"
#include "log.h"

namespace zipccl {

template <class F>
ncclResult_t guarded(const char* entry, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    static std::atomic<int64_t> last_s{-1};
    const int64_t now_s = now_ms() / 1000;
    if (last_s.exchange(now_s) != now_s) ZIP_WARN("%s: out of memory", entry);
    return ncclSystemError;
  } catch (const std::exception& e) {
    ZIP_WARN("%s: %s", entry, e.what());
    return ncclInternalError;
  } catch (...) {
    ZIP_WARN("%s: unknown exception", entry);
    return ncclInternalError;
  }
}

}  // namespace zipccl
