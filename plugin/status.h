// Internal result type: an NCCL result code plus a message that has already been logged.
#pragma once

#include "nccl_abi.h"

namespace zip {

struct Status {
  ncclResult_t code = ncclSuccess;
  bool ok() const { return code == ncclSuccess; }
  static Status Ok() { return {}; }
};

inline Status fail(ncclResult_t code) { return Status{code}; }

}  // namespace zip

#define ZIP_CHECK(expr)              \
  do {                               \
    ::zip::Status zip_s_ = (expr);   \
    if (!zip_s_.ok()) return zip_s_; \
  } while (0)

#include <atomic>
#include <mutex>
#include <string>

namespace zip {

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

}  // namespace zip
