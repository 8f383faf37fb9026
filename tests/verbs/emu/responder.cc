// The responder side of a reliable connection. A request is applied only when it is for a QP
// in RTR or RTS that is connected to its sender, and carries the next expected PSN; anything
// else is dropped (hardware stays silent; we say DROPPED so the requester's timer starts). Keys,
// ranges and access are checked before any byte of this process's memory is written or read.
#include <algorithm>

#include "access.h"
#include "engine.h"
#include "identity.h"

namespace zipccl::verbs::emu {
namespace {

constexpr uint32_t kPsnMask = 0xFFFFFF;

// Distance from expected to psn in the 24-bit PSN space, negative when psn is older.
int32_t psn_distance(uint32_t psn, uint32_t expected) {
  int32_t d = static_cast<int32_t>((psn - expected) & kPsnMask);
  return d >= 0x800000 ? d - 0x1000000 : d;
}

uint64_t mtu_bytes(uint32_t mtu) { return 128ull << mtu; }  // IBV_MTU_256 is 1

Header reply_header(const Header& req, Kind kind, Nak nak, uint8_t rnr_timer) {
  Header h{};
  h.magic = kMagic;
  h.kind = kind;
  h.op = req.op;
  h.nak = nak;
  h.dst_qpn = req.src_qpn;
  h.src_qpn = req.dst_qpn;
  h.psn = req.psn;
  h.generation = req.generation;
  h.rnr_timer = rnr_timer;
  h.src_node = node_id();
  return h;
}

void reply(Conn* conn, const Header& req, Kind kind, Nak nak, uint8_t rnr_timer = 0) {
  conn->queue(reply_header(req, kind, nak, rnr_timer), nullptr);
}

// A READ's ACK carrying the data; false (nothing queued) when it cannot be read.
bool reply_read(Conn* conn, const Header& req, const Span& data) {
  Header h = reply_header(req, Kind::kAck, Nak::kNone, 0);
  h.payload = req.length;
  char* dst = conn->reserve(h);
  if (req.length && !read_span(data, dst, req.length)) {
    conn->unreserve();
    return false;
  }
  return true;
}

bool connected_to_sender(const Qp* qp, const Header& h) {
  if (qp->verbs.state != IBV_QPS_RTR && qp->verbs.state != IBV_QPS_RTS) return false;
  if (qp->ctx->lost || qp->ctx->device->spec.down) return false;
  if (qp->attr.dest_qp_num != h.src_qpn || qp->remote_lid != h.src_lid) return false;
  if (qp->remote_node && qp->remote_node != h.src_node) return false;
  if (h.dst_node && h.dst_node != node_id()) return false;
  // The request must have come in through a port of the QP's device.
  for (const Port* p : qp->ctx->device->ports) {
    if (p->lid == h.dst_lid) return true;
  }
  return false;
}

// A responder-side error: NAK to the requester, QP to ERR. Errors that consumed no receive have
// no completion to report them here and raise an async event instead.
void fail(Qp* qp, Conn* conn, const Header& h, Nak nak) {
  reply(conn, h, Kind::kNak, nak);
  to_error(qp);
}

void fail(Qp* qp, Conn* conn, const Header& h, Nak nak, ibv_event_type event) {
  fail(qp, conn, h, nak);
  ibv_async_event ev{};
  ev.element.qp = &qp->verbs;
  ev.event_type = event;
  raise_event(qp->ctx, ev);
}

void recv_cqe(Qp* qp, const RecvWr& wr, const Header& h, ibv_wc_status status) {
  Cqe c = make_cqe(qp, wr.wr_id,
                   status, h.op == Op::kWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV);
  c.wc.byte_len = static_cast<uint32_t>(h.length);
  c.wc.src_qp = h.src_qpn;
  if (qp->ctx->device->spec.roce) {
    c.wc.wc_flags |= IBV_WC_GRH;  // RoCE packets always carry one
  } else {
    c.wc.slid = h.src_lid;
  }
  if (h.op == Op::kSendImm || h.op == Op::kWriteImm) {
    c.wc.wc_flags |= IBV_WC_WITH_IMM;
    c.wc.imm_data = h.imm;
  }
  push_cqe(qp->recv_cq, c);
}

// Whether the READ passes its checks: a zero-length one reads nothing and checks no key.
bool readable(Emu& e, const Qp* qp, const Header& h, Span* data) {
  if (h.flags & kFlagForceAccessError) return false;
  if (h.length == 0) return true;
  if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ)) return false;
  *data = remote_address(e, qp->pd, h.rkey, h.remote_addr, h.length, IBV_ACCESS_REMOTE_READ);
  return data->at != nullptr;
}

}  // namespace

void handle_request(Emu& e, Conn* conn, const Header& h, const char* payload) {
  if (h.kind != Kind::kRequest) return;
  auto it = e.qpns.find(h.dst_qpn);
  Qp* qp = it == e.qpns.end() ? nullptr : it->second;
  if (!qp || !connected_to_sender(qp, h)) {
    reply(conn, h, Kind::kDropped, Nak::kNone);
    return;
  }
  int32_t distance = psn_distance(h.psn, qp->expected_psn);
  if (distance > 0) {  // a gap: an earlier message was refused or lost
    reply(conn, h, Kind::kDropped, Nak::kNone);
    return;
  }
  if (distance < 0) {  // a retransmission of something applied: answer it again, apply nothing
    Span data;
    if (h.op != Op::kRead) {
      reply(conn, h, Kind::kAck, Nak::kNone);
    } else if (!readable(e, qp, h, &data) || !reply_read(conn, h, data)) {
      reply(conn, h, Kind::kDropped, Nak::kNone);
    }
    return;
  }

  // Larger than the responder's path MTU from a requester configured with a larger one: the
  // packets would be malformed for this QP.
  if (h.length > mtu_bytes(qp->attr.path_mtu) && h.path_mtu > qp->attr.path_mtu) {
    fail(qp, conn, h, Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
    return;
  }

  if (h.op == Op::kRead) {
    if (qp->attr.max_dest_rd_atomic == 0) {
      fail(qp, conn, h, Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
      return;
    }
    Span data;
    // Device memory that CUDA cannot read fails as a bad key would.
    if (!readable(e, qp, h, &data) || !reply_read(conn, h, data)) {
      fail(qp, conn, h, Nak::kRemoteAccess, IBV_EVENT_QP_ACCESS_ERR);
      return;
    }
    qp->expected_psn = (qp->expected_psn + 1) & kPsnMask;
    return;
  }

  Span target;
  if (h.op == Op::kWrite || h.op == Op::kWriteImm) {
    // A zero-length write moves no byte: hardware does not check its key.
    bool bad = h.flags & kFlagForceAccessError;
    if (!bad && h.length) {
      if (qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) {
        target = remote_address(e, qp->pd, h.rkey, h.remote_addr, h.length,
                                IBV_ACCESS_REMOTE_WRITE);
      }
      bad = !target.at;
    }
    if (bad) {
      fail(qp, conn, h, Nak::kRemoteAccess, IBV_EVENT_QP_ACCESS_ERR);
      return;
    }
  }

  bool consumes_recv = h.op != Op::kWrite;
  if (consumes_recv && qp->rq.empty()) {
    // Receiver not ready: nothing applied, the requester retries this PSN after our RNR timer.
    reply(conn, h, Kind::kNak, Nak::kRnr, qp->attr.min_rnr_timer);
    return;
  }

  if (h.op == Op::kSend || h.op == Op::kSendImm) {
    RecvWr wr = std::move(qp->rq.front());
    qp->rq.pop_front();
    uint64_t room = 0;
    for (const ibv_sge& s : wr.sges) room += s.length;
    if (!sges_valid(e, qp->pd, wr.sges, IBV_ACCESS_LOCAL_WRITE)) {
      recv_cqe(qp, wr, h, IBV_WC_LOC_PROT_ERR);
      fail(qp, conn, h, Nak::kRemoteOp);
      return;
    }
    if (room < h.length) {
      recv_cqe(qp, wr, h, IBV_WC_LOC_LEN_ERR);
      fail(qp, conn, h, Nak::kInvalidRequest);
      return;
    }
    const char* src = payload;
    uint64_t left = h.length;
    for (const ibv_sge& s : wr.sges) {
      uint64_t n = std::min<uint64_t>(s.length, left);
      if (!n) continue;
      // Device memory that CUDA cannot write fails as a bad receive SGE would.
      if (!write_span(local_address(e, qp->pd, s.lkey, s.addr, n, IBV_ACCESS_LOCAL_WRITE), src, n)) {
        recv_cqe(qp, wr, h, IBV_WC_LOC_PROT_ERR);
        fail(qp, conn, h, Nak::kRemoteOp);
        return;
      }
      src += n;
      left -= n;
    }
    recv_cqe(qp, wr, h, IBV_WC_SUCCESS);
  } else {
    if (h.length && !write_span(target, payload, h.length)) {
      fail(qp, conn, h, Nak::kRemoteAccess, IBV_EVENT_QP_ACCESS_ERR);
      return;
    }
    if (consumes_recv) {
      RecvWr wr = std::move(qp->rq.front());
      qp->rq.pop_front();
      recv_cqe(qp, wr, h, IBV_WC_SUCCESS);
    }
  }
  qp->expected_psn = (qp->expected_psn + 1) & kPsnMask;
  reply(conn, h, Kind::kAck, Nak::kNone);
}

}  // namespace zipccl::verbs::emu
