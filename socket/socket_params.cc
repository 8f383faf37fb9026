#include "socket_params.h"

#include "log.h"
#include "socket_wire.h"

namespace zipccl::tcp {

ZIP_PARAM(nthreads_env, "NCCL_SOCKET_NTHREADS", 2, 1, kMaxThreads)
ZIP_PARAM(nsocks_env, "NCCL_NSOCKS_PERTHREAD", 2, 1, kMaxDataSockets)
ZIP_PARAM(pace_env, "NCCL_ZIP_SOCKET_PACE_MBPS", 0, 0, int64_t(1) << 30)
ZIP_PARAM(inline_env, "NCCL_ZIP_SOCKET_INLINE", 32 << 10, 0, int64_t(kMaxInline))
ZIP_PARAM(lone_env, "NCCL_ZIP_SOCKET_INLINE_LONE", 0, 0, int64_t(kMaxInline))
ZIP_PARAM(eager_env, "NCCL_ZIP_SOCKET_EAGER", 8, 0, kMaxRequests)
ZIP_PARAM(push_env, "NCCL_ZIP_SOCKET_PUSH", 1, 0, 1)

int64_t pace_mbps() { return pace_env(); }

size_t inline_bytes() { return size_t(inline_env()); }

size_t inline_lone_bytes() { return size_t(lone_env()); }

InlineRule inline_rule() {
  static std::atomic<int64_t> last_past_always{0};
  return InlineRule(inline_bytes(), inline_lone_bytes(), &last_past_always);
}

uint32_t eager_ahead() { return uint32_t(eager_env()); }

bool push_receives() { return push_env() != 0; }

int socket_threads() { return int(nthreads_env()); }

int sockets_per_thread() {
  static const int n = [] {
    const int threads = socket_threads(), want = int(nsocks_env());
    if (threads * want <= kMaxDataSockets) return want;
    ZIP_WARN("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD exceeds %d sockets; using %d per thread",
             kMaxDataSockets, kMaxDataSockets / threads);
    return kMaxDataSockets / threads;
  }();
  return n;
}

}  // namespace zipccl::tcp
