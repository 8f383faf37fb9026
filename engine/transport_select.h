// NCCL_ZIP_TRANSPORT: which transport init uses. ib: the verbs transport or nothing; socket: TCP;
// auto (default): ib when libibverbs loads and a port is usable, else TCP.
#pragma once

#include <memory>

#include "transport.h"

namespace zipccl {

// Null (after a WARN) when NCCL_ZIP_TRANSPORT=ib and no RDMA device is usable.
std::unique_ptr<Transport> select_transport();

}  // namespace zipccl
