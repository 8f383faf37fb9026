// Errors are NCCL's result codes, as in NCCL itself: whoever first sees a failure logs it with
// its reason and returns the code, and callers pass it up with ZIP_CHECK.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "nccl_types.h"

#define ZIP_CHECK(expr)                               \
  do {                                                \
    const ncclResult_t zip_r_ = (expr);               \
    if (zip_r_ != ncclSuccess) return zip_r_;         \
  } while (0)

namespace zipccl {

// First error of a connection, set from any thread, read without locking on the hot path.
class StickyError {
 public:
  void set(ncclResult_t code, std::string text) {
    std::lock_guard<std::mutex> g(mu_);
    if (code_.load(std::memory_order_relaxed) != ncclSuccess) return;
    text_ = std::move(text);
    code_.store(code, std::memory_order_release);
  }
  ncclResult_t code() const { return code_.load(std::memory_order_acquire); }
  std::string text() const {
    std::lock_guard<std::mutex> g(mu_);
    return text_;
  }

 private:
  std::atomic<ncclResult_t> code_{ncclSuccess};
  mutable std::mutex mu_;
  std::string text_;
};

}  // namespace zipccl
