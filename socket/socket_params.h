// The socket transport's knobs: NCCL's own, with its meaning and limits.
#pragma once

#include "param.h"

namespace zipccl::tcp {

constexpr int kMaxThreads = 16;  // NCCL's socket transport limits
constexpr int kMaxDataSockets = 64;

// Helper threads per connection (NCCL_SOCKET_NTHREADS) and data sockets each thread owns
// (NCCL_NSOCKS_PERTHREAD); their product is capped at kMaxDataSockets.
int socket_threads();
int sockets_per_thread();

}  // namespace zipccl::tcp
