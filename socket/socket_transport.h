// TCP transport: one control socket plus NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD data sockets
// per connection, data striped across them and moved by helper threads. Connection setup is a
// non-blocking state machine on both sides; every socket opens with a hello that carries the
// listener's random nonce, so strangers on the listen port are rejected.
#pragma once

#include <memory>
#include <vector>

#include "transport.h"

namespace zipccl::tcp {

std::unique_ptr<Transport> make_socket_transport();

}  // namespace zipccl::tcp
