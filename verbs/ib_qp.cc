#include "ib_qp.h"

#include <cerrno>
#include <cstring>
#include <initializer_list>

#include "log.h"
#include "ib_params.h"

namespace zipccl::verbs {
namespace {

ncclResult_t modify(const IbvFunctions& fn, ibv_qp* qp, ibv_qp_attr* attr, int mask, const char* to, const char* dev) {
  if (fn.modify_qp(qp, attr, mask) == 0) return ncclSuccess;
  ZIP_WARN("%s: moving queue pair %u to %s failed: %s", dev, qp->qp_num, to, std::strerror(errno));
  return ncclSystemError;
}

// The 64-bit subnet prefix of a GID (its first 8 bytes).
uint64_t subnet_prefix(const uint8_t gid[16]) {
  uint64_t v;
  std::memcpy(&v, gid, sizeof v);
  return v;
}

}  // namespace

ibv_qp* create_rc_qp(const IbvFunctions& fn, ibv_pd* pd, ibv_cq* cq, uint32_t send_wr, uint32_t recv_wr,
                     const char* dev, uint32_t want_inline, uint32_t* max_inline) {
  ibv_qp_init_attr a;
  ibv_qp* qp = nullptr;
  // Providers refuse an inline size they cannot do: then none.
  for (uint32_t inl : {want_inline, 0u}) {
    std::memset(&a, 0, sizeof a);
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = send_wr;
    a.cap.max_recv_wr = recv_wr;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = inl;
    qp = fn.create_qp(pd, &a);
    if (qp || inl == 0) break;
  }
  if (!qp) ZIP_WARN("%s: ibv_create_qp failed: %s", dev, std::strerror(errno));
  if (qp && max_inline) *max_inline = a.cap.max_inline_data;  // what the provider granted
  return qp;
}

ncclResult_t qp_to_init(const IbvFunctions& fn, ibv_qp* qp, int port, const char* dev) {
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = uint16_t(ib_pkey_index());
  a.port_num = uint8_t(port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  return modify(fn, qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT", dev);
}

ncclResult_t qp_to_rts(const IbvFunctions& fn, ibv_qp* qp, const QpPath& path, const QpPeer& peer, const char* dev) {
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = path.mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  // RoCE always routes by GID; IB by LID within a subnet, by GID across subnets.
  const bool global = path.link_layer == IBV_LINK_LAYER_ETHERNET || subnet_prefix(path.gid) != subnet_prefix(peer.gid);
  a.ah_attr.is_global = global;
  a.ah_attr.dlid = path.link_layer == IBV_LINK_LAYER_ETHERNET ? 0 : peer.lid;
  if (global) {
    std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
    a.ah_attr.grh.sgid_index = uint8_t(path.gid_index);
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = uint8_t(path.traffic_class >= 0 ? path.traffic_class : ib_tc());
  }
  a.ah_attr.sl = uint8_t(ib_sl());
  a.ah_attr.port_num = uint8_t(path.port);
  ZIP_CHECK(modify(fn, qp, &a,
                   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                   "RTR", dev));
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = uint8_t(ib_timeout());
  a.retry_cnt = uint8_t(ib_retry_cnt());
  a.rnr_retry = 7;  // infinite: receives for every message in flight are posted, so an RNR wait is transient
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return modify(fn, qp, &a,
                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                    IBV_QP_MAX_QP_RD_ATOMIC,
                "RTS", dev);
}

ibv_mtu mtu_from_bytes(int bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

int mtu_bytes(ibv_mtu mtu) { return 128 << int(mtu); }

}  // namespace zipccl::verbs
