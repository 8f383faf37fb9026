// Whether an HCA can move GPU memory itself (GPUDirect RDMA), found out as NCCL's net_ib does:
// nvidia-peermem (or the older nv_peer_mem) lets ibv_reg_mr take device pointers; DMA-BUF lets
// ibv_reg_dmabuf_mr take the fd CUDA exports for device memory.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "ibv_loader.h"

namespace zipccl::verbs {

// A peer-memory module is loaded: one of the files NCCL looks for exists under root ("" for the
// real /sys).
bool peermem_loaded(const std::string& root);

// The kernel and the HCA's driver register DMA-BUFs: NCCL's probe, a registration of fd -1,
// fails with EBADF where they do and EOPNOTSUPP / EPROTONOSUPPORT where they do not (or the
// library predates ibv_reg_dmabuf_mr).
bool dmabuf_supported(const IbvFunctions& fn, ibv_pd* pd);

}  // namespace zipccl::verbs
