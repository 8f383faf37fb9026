// The socket transport's knobs: NCCL's own, with its meaning and limits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "inline_rule.h"
#include "param.h"

namespace zipccl::tcp {

constexpr int kMaxThreads = 16;  // NCCL's socket transport limits
constexpr int kMaxDataSockets = 64;

// Helper threads per connection (NCCL_SOCKET_NTHREADS) and data sockets each thread owns
// (NCCL_NSOCKS_PERTHREAD); their product is capped at kMaxDataSockets.
int socket_threads();
int sockets_per_thread();
// NCCL_ZIP_SOCKET_PACE_MBPS: each connection's send rate capped at this many Mb/s, and the
// interfaces reported at that speed (benchmarks: a slower NIC on loopback); 0 no cap.
int64_t pace_mbps();
// NCCL_ZIP_SOCKET_INLINE: messages of at most this many bytes on the wire travel inside their
// header on the control socket, sent and received by NCCL's progress thread itself; larger ones
// are striped over the data sockets by the helper threads. 0: none inline.
size_t inline_bytes();
// NCCL_ZIP_SOCKET_INLINE_LONE: messages up to this many bytes also go inline when no other message
// past NCCL_ZIP_SOCKET_INLINE left the process just before (inline_rule.h). 0: none.
size_t inline_lone_bytes();
// The rule of both knobs, one for every link of the process.
InlineRule inline_rule();
// NCCL_ZIP_SOCKET_EAGER: inline messages a sender sends before the receiver's clear-to-send for
// them, at most this many beyond the clear-to-sends it has; they hold only raw messages that the
// policy never compresses (auto: below NCCL_ZIP_MIN_BYTES). 0: every message waits for its
// clear-to-send.
uint32_t eager_ahead();
// NCCL_ZIP_SOCKET_PUSH: receives that never take compressed bytes send no clear-to-send; their
// sender pushes (socket_link.h). 0: a clear-to-send for every receive.
bool push_receives();

}  // namespace zipccl::tcp
