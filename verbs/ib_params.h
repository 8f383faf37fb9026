// The verbs transport's knobs: NCCL's NCCL_IB_* with NCCL's meaning and defaults, and ours.
#pragma once

#include "param.h"

namespace zipccl::verbs {

constexpr int kMaxQpsPerConn = 16;

ZIP_PARAM(ib_timeout, "NCCL_IB_TIMEOUT", 20, 1, 31)  // local ACK timeout, 4.096 us x 2^value
ZIP_PARAM(ib_retry_cnt, "NCCL_IB_RETRY_CNT", 7, 0, 7)
ZIP_PARAM(ib_tc, "NCCL_IB_TC", 0, 0, 255)  // traffic class (RoCE GRH)
ZIP_PARAM(ib_sl, "NCCL_IB_SL", 0, 0, 15)   // service level
ZIP_PARAM(ib_qps_per_conn, "NCCL_IB_QPS_PER_CONNECTION", 1, 1, kMaxQpsPerConn)  // data striped over them
ZIP_PARAM(ib_pkey_index, "NCCL_IB_PKEY", 0, 0, 0xFFFF)  // partition key index, as NCCL uses it
ZIP_PARAM(ib_merge_vfs, "NCCL_IB_MERGE_VFS", 1, 0, 1)   // report a VF at its PF's PCI path
// No 1-byte RDMA-read flush after GPUDirect receives.
ZIP_PARAM(ib_gdr_flush_disable, "NCCL_IB_GDR_FLUSH_DISABLE", 0, 0, 1)
// PCIe relaxed ordering for registrations: 0 off, 1 on, 2 auto (where the library can).
ZIP_PARAM(ib_relaxed_ordering, "NCCL_IB_PCI_RELAXED_ORDERING", 2, 0, 2)
// NCCL_IB_MTU in bytes (256..4096, a power of two), capping the path MTU; 0 when unset.
int ib_mtu();

}  // namespace zipccl::verbs
