// Environment knobs, read once per process on first use, as NCCL's NCCL_PARAM: each layer declares
// the ones it reads (socket/socket_params.h, verbs/ib_params.h, engine/engine_params.h, and the
// shared ones below). NCCL_ZIP_* are ours; NCCL's own names keep NCCL's meaning.
#pragma once

#include <cstdint>
#include <string>

namespace zipccl {

// The integer in `name`, or def when unset: decimal for NCCL_ZIP_* names, C syntax (0x, leading
// 0) for NCCL's own as NCCL parses them. A value that does not parse or lies outside [lo, hi] is
// ignored with a WARN and a line on stderr; a value that is used is logged under NCCL_ENV.
int64_t env_int(const char* name, int64_t def, int64_t lo, int64_t hi);
// The string in `name`, empty when unset.
std::string env_str(const char* name);

}  // namespace zipccl

// Declares `int64_t fn()`: the knob `env`, read and checked on the first call.
#define ZIP_PARAM(fn, env, def, lo, hi)                                       \
  inline int64_t fn() {                                                       \
    static const int64_t zip_v_ = ::zipccl::env_int(env, def, lo, hi);        \
    return zip_v_;                                                            \
  }
#define ZIP_STR_PARAM(fn, env)                                                \
  inline const std::string& fn() {                                            \
    static const std::string zip_v_ = ::zipccl::env_str(env);                 \
    return zip_v_;                                                            \
  }

namespace zipccl {

// TCP, used by both transports (the socket transport's data path, the verbs transport's
// bootstrap connection).
ZIP_STR_PARAM(socket_ifname, "NCCL_SOCKET_IFNAME")
ZIP_STR_PARAM(socket_family, "NCCL_SOCKET_FAMILY")  // AF_INET, AF_INET6 or empty
// A peer that connects but stays silent is dropped after this.
ZIP_PARAM(handshake_timeout_ms, "NCCL_ZIP_HANDSHAKE_TIMEOUT_MS", 10000, 1, 3600 * 1000)
// TCP_USER_TIMEOUT of connection sockets: how long a dead peer can hold data unacknowledged.
ZIP_PARAM(socket_timeout_ms, "NCCL_ZIP_SOCKET_TIMEOUT_MS", 30000, 0, 3600 * 1000)

}  // namespace zipccl
