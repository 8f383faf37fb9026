// The TCP transport: one plugin device per interface NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY
// select (as NCCL's own socket transport picks them), links set up by socket_setup.h and moving
// messages as socket_link.h describes.
#pragma once

#include <memory>

#include "transport.h"

namespace zipccl::tcp {

std::unique_ptr<Transport> make_socket_transport();

}  // namespace zipccl::tcp
