// The requester side of a reliable connection: send queue to the wire, in order, every message
// with its PSN; completion only when the responder has applied it (ACK); go-back to the oldest
// unacknowledged message after an RNR NAK (after the responder's RNR timer) or a loss (after the
// QP's ack timeout), within the QP's rnr_retry and retry_cnt; errors complete the head WR, put
// the QP in ERR and flush the rest.
#include <algorithm>
#include <cstring>

#include "access.h"
#include "engine.h"
#include "identity.h"

namespace zipccl::verbs::emu {
namespace {

// Tests must not wait for real IB timeouts (NCCL's default is 4 s x 7 retries): the whole
// transport retry budget of a QP is capped, and so is one RNR back-off.
constexpr Clock::duration kRetryBudgetCap = std::chrono::seconds(2);
constexpr Clock::duration kRnrDelayCap = std::chrono::milliseconds(100);
// No reply at all (a stopped peer whose socket stays open) counts as a transport retry
// exhaustion after this long, whatever the QP's timeout.
constexpr Clock::duration kSilenceLimit = std::chrono::seconds(4);
// Requests queued on one connection before the requesters on it wait for the socket to drain.
constexpr size_t kMaxQueuedBytes = 16u << 20;

// One ack timeout: 4.096 us x 2^timeout (0 means infinite), the retries sharing the cap.
Clock::duration ack_timeout(const Qp* qp) {
  Clock::duration share = kRetryBudgetCap / (qp->attr.retry_cnt + 1);
  if (qp->attr.timeout == 0) return share;
  auto t = std::chrono::nanoseconds(static_cast<int64_t>(4096) << qp->attr.timeout);
  return std::min<Clock::duration>(t, share);
}

// The IB encoding of min_rnr_timer, in microseconds (0 is the longest, 655.36 ms).
Clock::duration rnr_delay(uint8_t code) {
  static const uint32_t kUs[32] = {655360, 10,    20,    30,    40,    60,     80,     120,
                                   160,    240,   320,   480,   640,   960,    1280,   1920,
                                   2560,   3840,  5120,  7680,  10240, 15360,  20480,  30720,
                                   40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return std::min<Clock::duration>(std::chrono::microseconds(kUs[code & 31]), kRnrDelayCap);
}

ibv_wc_opcode wc_opcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    default:
      return IBV_WC_SEND;
  }
}

Op wire_op(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_SEND_WITH_IMM:
      return Op::kSendImm;
    case IBV_WR_RDMA_WRITE:
      return Op::kWrite;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return Op::kWriteImm;
    case IBV_WR_RDMA_READ:
      return Op::kRead;
    default:
      return Op::kSend;
  }
}

void send_cqe(Qp* qp, const SendWr& wr, ibv_wc_status status) {
  Cqe c = make_cqe(qp, wr.wr_id, status, wc_opcode(wr.opcode));
  if (status == IBV_WC_SUCCESS && wr.opcode == IBV_WR_RDMA_READ) {
    c.wc.byte_len = static_cast<uint32_t>(wr.length);
  }
  c.send = true;
  c.index = wr.index;
  push_cqe(qp->send_cq, c);
}

// Everything outstanding completes with IBV_WC_WR_FLUSH_ERR, signaled or not, in order.
void flush(Qp* qp) {
  for (const SendWr& wr : qp->sq) send_cqe(qp, wr, IBV_WC_WR_FLUSH_ERR);
  qp->sq.clear();
  qp->next_tx = 0;
  for (const RecvWr& wr : qp->rq) push_cqe(qp->recv_cq, make_cqe(qp, wr.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV));
  qp->rq.clear();
}

// The head WR fails: its completion carries status (always, signaled or not), the QP goes to
// ERR and the rest flushes.
void fail_head(Qp* qp, ibv_wc_status status) {
  send_cqe(qp, qp->sq.front(), status);
  qp->sq.pop_front();
  to_error(qp);
  flush(qp);
}

void complete_head(Emu& e, Qp* qp) {
  SendWr wr = std::move(qp->sq.front());
  qp->sq.pop_front();
  --qp->next_tx;
  qp->retries_left = qp->attr.retry_cnt;
  qp->rnr_retries_left = qp->attr.rnr_retry;
  if (wr.signaled) send_cqe(qp, wr, IBV_WC_SUCCESS);
  if (wr.fault_qp_error) {
    to_error(qp);
    ibv_async_event ev{};
    ev.element.qp = &qp->verbs;
    ev.event_type = IBV_EVENT_QP_FATAL;
    raise_event(qp->ctx, ev);
  }
  if (wr.fault_device_lost) lose_device(e, qp->ctx);
}

// Back to the oldest unacknowledged WR: everything after it is sent again. Replies to what went
// out before carry the old generation and are ignored.
void rewind(Qp* qp) {
  for (size_t i = 0; i < qp->next_tx; ++i) qp->sq[i].sent = qp->sq[i].lost = false;
  qp->next_tx = 0;
  ++qp->generation;
}

void mark_lost(SendWr& wr, Clock::time_point now) {
  if (wr.lost) return;
  wr.lost = true;
  wr.lost_at = now;
}

enum class Tx { kSent, kBlocked, kLocalError };

Tx transmit(Emu& e, Qp* qp, SendWr& wr, Clock::time_point now) {
  bool read = wr.opcode == IBV_WR_RDMA_READ;
  if (!wr.is_inline && !sges_valid(e, qp->pd, wr.sges, read ? IBV_ACCESS_LOCAL_WRITE : 0)) {
    wr.local_error = IBV_WC_LOC_PROT_ERR;
    return Tx::kLocalError;
  }
  const Port* port = qp->ctx->device->ports[qp->attr.port_num - 1];
  Conn* conn = nullptr;
  if (!qp->ctx->device->spec.down && !wr.fault_lost && qp->remote_lid) {
    conn = conn_to(e, qp->remote_lid);
  }
  if (conn && conn->queued_bytes() > kMaxQueuedBytes) return Tx::kBlocked;
  wr.sent = true;
  wr.sent_at = now;
  wr.lost = false;
  if (!conn) {
    // Unroutable, port down, nobody listening there, or the retry fault: it never arrives.
    mark_lost(wr, now);
    return Tx::kSent;
  }
  Header h{};
  h.magic = kMagic;
  h.kind = Kind::kRequest;
  h.op = wire_op(wr.opcode);
  h.flags = wr.fault_rkey ? kFlagForceAccessError : 0;
  h.dst_qpn = qp->attr.dest_qp_num;
  h.src_qpn = qp->verbs.qp_num;
  h.psn = wr.psn;
  h.generation = qp->generation;
  h.imm = wr.imm;
  h.rkey = wr.rkey;
  h.dst_lid = qp->remote_lid;
  h.src_lid = port->lid;
  h.path_mtu = static_cast<uint8_t>(qp->attr.path_mtu);
  h.dst_node = qp->remote_node;
  h.src_node = node_id();
  h.remote_addr = wr.remote_addr;
  h.length = wr.length;
  h.payload = read ? 0 : wr.length;
  char* dst = conn->reserve(h);
  if (wr.is_inline) {
    if (!wr.inline_data.empty()) std::memcpy(dst, wr.inline_data.data(), wr.inline_data.size());
  } else if (!read) {
    for (const ibv_sge& s : wr.sges) {
      if (!s.length) continue;
      if (!read_span(local_address(e, qp->pd, s.lkey, s.addr, s.length, 0), dst, s.length)) {
        // Device memory CUDA could not read (freed while registered): a local protection
        // error, as the HCA's DMA would fail.
        conn->unreserve();
        wr.sent = false;
        wr.local_error = IBV_WC_LOC_PROT_ERR;
        return Tx::kLocalError;
      }
      dst += s.length;
    }
  }
  return Tx::kSent;
}

// A READ's data into the WR's local SGEs, checked again: the MR may be gone since it was sent.
// False on a failed check or copy.
bool scatter_read(Emu& e, Qp* qp, const SendWr& wr, const char* data, uint64_t len) {
  if (len != wr.length || !sges_valid(e, qp->pd, wr.sges, IBV_ACCESS_LOCAL_WRITE)) return false;
  for (const ibv_sge& s : wr.sges) {
    if (!s.length) continue;
    if (!write_span(local_address(e, qp->pd, s.lkey, s.addr, s.length, IBV_ACCESS_LOCAL_WRITE),
                    data, s.length)) {
      return false;
    }
    data += s.length;
  }
  return true;
}

}  // namespace

Clock::time_point progress_requester(Emu& e, Qp* qp, Clock::time_point now) {
  Clock::time_point next = now + std::chrono::hours(1);
  if (qp->verbs.state == IBV_QPS_ERR) {
    flush(qp);
    return next;
  }
  if (qp->verbs.state != IBV_QPS_RTS || qp->sq.empty()) return next;

  SendWr& head = qp->sq.front();
  if (head.local_error != IBV_WC_SUCCESS) {
    fail_head(qp, head.local_error);
    return next;
  }
  if (head.sent && head.lost) {
    Clock::time_point retry_at = head.lost_at + ack_timeout(qp);
    if (now < retry_at) return retry_at;
    if (qp->retries_left == 0) {
      fail_head(qp, IBV_WC_RETRY_EXC_ERR);
      return next;
    }
    --qp->retries_left;
    rewind(qp);
  } else if (head.sent) {
    if (now - head.sent_at >= kSilenceLimit) {
      fail_head(qp, IBV_WC_RETRY_EXC_ERR);
      return next;
    }
    next = head.sent_at + kSilenceLimit;
  }
  if (now < qp->resume_at) return std::min(next, qp->resume_at);

  while (qp->next_tx < qp->sq.size()) {
    SendWr& wr = qp->sq[qp->next_tx];
    if (wr.local_error != IBV_WC_SUCCESS) break;  // fails when it reaches the head
    if (wr.eligible > now) return std::min(next, wr.eligible);
    Tx tx = transmit(e, qp, wr, now);
    if (tx == Tx::kBlocked) return std::min(next, now + std::chrono::milliseconds(1));
    if (tx == Tx::kLocalError) {
      // Nothing after it may go out; if it is the head it fails now.
      if (qp->next_tx == 0) {
        fail_head(qp, wr.local_error);
        return next;
      }
      break;
    }
    ++qp->next_tx;
  }
  if (!qp->sq.empty() && qp->sq.front().lost) {
    next = std::min(next, qp->sq.front().lost_at + ack_timeout(qp));
  }
  return next;
}

void handle_reply(Emu& e, const Header& h, const char* payload) {
  auto it = e.qpns.find(h.dst_qpn);
  if (it == e.qpns.end()) return;
  Qp* qp = it->second;
  if (qp->verbs.state != IBV_QPS_RTS || h.generation != qp->generation || qp->sq.empty()) return;
  SendWr& head = qp->sq.front();
  if (!head.sent || head.psn != h.psn) return;
  Clock::time_point now = Clock::now();
  switch (h.kind) {
    case Kind::kAck:
      if (head.opcode == IBV_WR_RDMA_READ && !scatter_read(e, qp, head, payload, h.payload)) {
        fail_head(qp, IBV_WC_LOC_PROT_ERR);
        return;
      }
      complete_head(e, qp);
      return;
    case Kind::kNak:
      switch (h.nak) {
        case Nak::kRnr:
          if (qp->attr.rnr_retry != 7) {  // 7: retry for ever
            if (qp->rnr_retries_left == 0) {
              fail_head(qp, IBV_WC_RNR_RETRY_EXC_ERR);
              return;
            }
            --qp->rnr_retries_left;
          }
          rewind(qp);
          qp->resume_at = now + rnr_delay(h.rnr_timer);
          return;
        case Nak::kRemoteAccess:
          fail_head(qp, IBV_WC_REM_ACCESS_ERR);
          return;
        case Nak::kInvalidRequest:
          fail_head(qp, IBV_WC_REM_INV_REQ_ERR);
          return;
        default:
          fail_head(qp, IBV_WC_REM_OP_ERR);
          return;
      }
    case Kind::kDropped:
      mark_lost(head, now);
      return;
    default:
      return;
  }
}

void peer_unreachable(Emu& e, uint16_t lid) {
  Clock::time_point now = Clock::now();
  for (auto& [ptr, qp] : e.qps) {
    if (qp->remote_lid != lid || qp->verbs.state != IBV_QPS_RTS) continue;
    for (size_t i = 0; i < qp->next_tx; ++i) mark_lost(qp->sq[i], now);
  }
}

}  // namespace zipccl::verbs::emu
