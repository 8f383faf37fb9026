#include "line_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace zipccl::tcp {

void copy_lines_in_order(char* dst, const char* src, size_t n) {
  const size_t words = n & ~size_t(7);
  for (size_t off = 0; off < words; off += kLine) {
    const size_t line = std::min(kLine, words - off);
    std::memcpy(dst + off, src + off, std::min(line, kLine - 8));
    std::atomic_thread_fence(std::memory_order_release);
    if (line > kLine - 8) std::memcpy(dst + off + kLine - 8, src + off + kLine - 8, line - (kLine - 8));
    std::atomic_thread_fence(std::memory_order_release);
  }
  volatile char* out = dst;  // one store per byte, in order
  for (size_t i = words; i < n; ++i) out[i] = src[i];
}

}  // namespace zipccl::tcp
