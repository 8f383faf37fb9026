// The ibverbs transport (NCCL_ZIP_TRANSPORT=ib, or auto when a device is usable): libibverbs
// loaded at run time (NCCL_ZIP_IBVERBS_LIB overrides which), one plugin device per usable port,
// connections bootstrapped over TCP on NCCL_SOCKET_IFNAME's first interface.
#pragma once

#include <memory>
#include <string>

#include "transport.h"

namespace zipccl::verbs {

// Null, with the reason in *why, when libibverbs does not load or no port is usable.
std::unique_ptr<Transport> make_ib_transport(std::string* why);

}  // namespace zipccl::verbs
