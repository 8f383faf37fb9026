// Reliable-connected queue pairs: creation and the INIT -> RTR -> RTS transitions, with NCCL's
// attributes (net_ib/connect.cc) and its knobs (NCCL_IB_PKEY, NCCL_IB_SL, NCCL_IB_TC,
// NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "ibv_loader.h"
#include "status.h"

namespace zipccl::verbs {

// One end's address as the other end needs it.
struct QpPeer {
  uint32_t qpn;
  uint16_t lid;
  uint8_t gid[16];
};

// The local port's side of the path.
struct QpPath {
  int port;
  int link_layer;  // IBV_LINK_LAYER_*
  int gid_index;
  const uint8_t* gid;  // the local GID at gid_index
  ibv_mtu mtu;         // already the minimum of both ends
  int traffic_class;   // RoCE/GRH traffic class; -1: NCCL_IB_TC
};

// A QP on cq (send and receive), single-SGE work requests, room for `want_inline` bytes of inline
// data if the provider grants it (else none); *max_inline gets what it granted. Logs and returns
// null on failure.
ibv_qp* create_rc_qp(const IbvFunctions& fn, ibv_pd* pd, ibv_cq* cq, uint32_t send_wr, uint32_t recv_wr,
                     const char* dev, uint32_t want_inline = 0, uint32_t* max_inline = nullptr);
// RESET -> INIT on the port, remote read and write allowed.
ncclResult_t qp_to_init(const IbvFunctions& fn, ibv_qp* qp, int port, const char* dev);
// INIT -> RTR towards peer, then RTR -> RTS.
ncclResult_t qp_to_rts(const IbvFunctions& fn, ibv_qp* qp, const QpPath& path, const QpPeer& peer, const char* dev);

// IBV_MTU_* for a size in bytes (256..4096), and back.
ibv_mtu mtu_from_bytes(int bytes);
int mtu_bytes(ibv_mtu mtu);

}  // namespace zipccl::verbs
