// RC queue pairs: creation, the state machine with the kernel's attribute rules, and posting.
#include <algorithm>
#include <cstring>

#include "api.h"
#include "identity.h"
#include "state.h"

using namespace zipccl::verbs::emu;

namespace {

constexpr uint32_t kPsnMask = 0xFFFFFF;

struct Transition {
  ibv_qp_state from, to;
  int required, optional;
};

// The RC rows of the kernel's qp_state_table (ib_modify_qp_is_ok); moves to RESET and ERR are
// allowed from every state with nothing but IBV_QP_STATE. SQD and SQE are not emulated.
constexpr Transition kTransitions[] = {
    {IBV_QPS_RESET, IBV_QPS_RESET, 0, 0},
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
         IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
         IBV_QP_PATH_MIG_STATE},
    {IBV_QPS_RTS, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
         IBV_QP_MIN_RNR_TIMER},
};

bool transition_ok(ibv_qp_state from, ibv_qp_state to, int mask) {
  int required = 0, optional = 0;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    if (from > IBV_QPS_ERR || from == IBV_QPS_SQD || from == IBV_QPS_SQE) return false;
  } else {
    const Transition* t = std::find_if(std::begin(kTransitions), std::end(kTransitions),
                                       [&](const Transition& t) { return t.from == from && t.to == to; });
    if (t == std::end(kTransitions)) return false;
    required = t->required;
    optional = t->optional;
  }
  if ((mask & required) != required) return false;
  return (mask & ~(IBV_QP_STATE | required | optional)) == 0;
}

// The values the kernel or the device would refuse.
bool values_ok(const Qp* qp, const ibv_qp_attr* a, int mask) {
  const Device* d = qp->ctx->device;
  constexpr unsigned kQpAccess =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if ((mask & IBV_QP_PORT) && (a->port_num < 1 || a->port_num > d->spec.ports)) return false;
  if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return false;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (a->qp_access_flags & ~kQpAccess)) return false;
  if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) {
    return false;
  }
  if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > kPsnMask) return false;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > kMaxRdAtomic) return false;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > kMaxRdAtomic) return false;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return false;
  if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return false;
  if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return false;
  if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return false;
  if (mask & IBV_QP_AV) {
    // RoCE has no LIDs: an address without a GRH cannot be resolved.
    if (d->spec.roce && !a->ah_attr.is_global) return false;
    if (a->ah_attr.is_global && a->ah_attr.grh.sgid_index >= kGidTableLen) return false;
  }
  return true;
}

// The peer the address vector names: by GID with a GRH, by LID otherwise. An address that no
// emulated port has leaves it unroutable (0): its traffic is lost, as on a fabric.
void resolve_remote(Qp* qp, const ibv_ah_attr& ah) {
  qp->remote_lid = 0;
  qp->remote_node = 0;
  if (ah.is_global) {
    Route r;
    if (route_from_gid(ah.grh.dgid, &r)) {
      qp->remote_lid = r.lid;
      qp->remote_node = r.node;
    }
  } else {
    qp->remote_lid = ah.dlid;
  }
}

void copy_attrs(Qp* qp, const ibv_qp_attr* a, int mask) {
  ibv_qp_attr& q = qp->attr;
  if (mask & IBV_QP_PKEY_INDEX) q.pkey_index = a->pkey_index;
  if (mask & IBV_QP_PORT) q.port_num = a->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) q.qp_access_flags = a->qp_access_flags;
  if (mask & IBV_QP_AV) q.ah_attr = a->ah_attr;
  if (mask & IBV_QP_ALT_PATH) {
    q.alt_ah_attr = a->alt_ah_attr;
    q.alt_pkey_index = a->alt_pkey_index;
    q.alt_port_num = a->alt_port_num;
    q.alt_timeout = a->alt_timeout;
  }
  if (mask & IBV_QP_PATH_MTU) q.path_mtu = a->path_mtu;
  if (mask & IBV_QP_DEST_QPN) q.dest_qp_num = a->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) q.rq_psn = a->rq_psn & kPsnMask;
  if (mask & IBV_QP_SQ_PSN) q.sq_psn = a->sq_psn & kPsnMask;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q.max_dest_rd_atomic = a->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q.max_rd_atomic = a->max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) q.min_rnr_timer = a->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) q.timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) q.retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q.rnr_retry = a->rnr_retry;
  if (mask & IBV_QP_PATH_MIG_STATE) q.path_mig_state = a->path_mig_state;
}

// RESET forgets everything: queues emptied without completions, attributes back to defaults.
void reset(Qp* qp) {
  qp->sq.clear();
  qp->rq.clear();
  qp->next_tx = 0;
  qp->sq_posted = qp->sq_released = qp->rq_posted = qp->rq_released = 0;
  ++qp->epoch;
  ++qp->generation;
  qp->resume_at = {};
  qp->last_eligible = {};
  qp->remote_lid = 0;
  qp->remote_node = 0;
  qp->attr = ibv_qp_attr{};
  qp->attr.cap = qp->cap;
}

bool is_rdma(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ;
}

// Checks one send WR at post time; 0 or the errno that post_send returns for it.
int check_send_wr(const Qp* qp, const ibv_send_wr* w, uint64_t* length) {
  switch (w->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      break;
    default:
      return EINVAL;  // atomics, memory windows, TSO...: not emulated
  }
  if (w->num_sge < 0 || static_cast<uint32_t>(w->num_sge) > qp->cap.max_send_sge) return EINVAL;
  if (qp->sq_posted - qp->sq_released >= qp->cap.max_send_wr) return ENOMEM;
  uint64_t total = 0;
  for (int i = 0; i < w->num_sge; ++i) total += w->sg_list[i].length;
  if (total > kMaxMsg) return EINVAL;
  if (w->send_flags & IBV_SEND_INLINE) {
    if (w->opcode == IBV_WR_RDMA_READ || total > qp->cap.max_inline_data) return EINVAL;
  }
  *length = total;
  return 0;
}

}  // namespace

ZIP_EMU_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Pd* p = find(e, pd);
  if (!p) return fail_null<ibv_qp>(EINVAL);
  if (p->ctx->lost) return fail_null<ibv_qp>(EIO);
  if (init->qp_type != IBV_QPT_RC || init->srq) return fail_null<ibv_qp>(EOPNOTSUPP);
  Cq* scq = find(e, init->send_cq);
  Cq* rcq = find(e, init->recv_cq);
  if (!scq || !rcq || scq->ctx != p->ctx || rcq->ctx != p->ctx) return fail_null<ibv_qp>(EINVAL);
  const ibv_qp_cap& cap = init->cap;
  if (cap.max_send_wr > static_cast<uint32_t>(kMaxQpWr) ||
      cap.max_recv_wr > static_cast<uint32_t>(kMaxQpWr) ||
      cap.max_send_sge > static_cast<uint32_t>(kMaxSge) ||
      cap.max_recv_sge > static_cast<uint32_t>(kMaxSge) || cap.max_inline_data > kMaxInline) {
    return fail_null<ibv_qp>(EINVAL);
  }
  if (e.qpns.size() >= static_cast<size_t>(kMaxQp)) return fail_null<ibv_qp>(ENOMEM);
  auto qp = std::make_unique<Qp>();
  qp->ctx = p->ctx;
  qp->pd = p;
  qp->send_cq = scq;
  qp->recv_cq = rcq;
  qp->cap = cap;  // granted exactly as asked, so going over it fails here as it may on a NIC
  qp->sig_all = init->sq_sig_all != 0;
  qp->attr.cap = cap;
  uint32_t qpn;
  do {
    qpn = e.next_qpn++ & kPsnMask;
  } while (qpn < 2 || e.qpns.count(qpn));  // 0 and 1 are the special QPs
  ibv_qp& v = qp->verbs;
  v.context = pd->context;
  v.qp_context = init->qp_context;
  v.pd = pd;
  v.send_cq = init->send_cq;
  v.recv_cq = init->recv_cq;
  v.handle = e.next_handle++;
  v.qp_num = qpn;
  v.state = IBV_QPS_RESET;
  v.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&v.mutex, nullptr);
  pthread_cond_init(&v.cond, nullptr);
  ++p->refs;
  ++scq->refs;
  ++rcq->refs;
  e.qpns[qpn] = qp.get();
  return &e.qps.emplace(&v, std::move(qp)).first->second->verbs;
}

ZIP_EMU_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Qp* q = find(e, qp);
  if (!q) return EINVAL;
  if (q->ctx->lost) return EIO;
  ibv_qp_state cur = q->verbs.state;
  if ((attr_mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
  ibv_qp_state next = (attr_mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if (!transition_ok(cur, next, attr_mask) || !values_ok(q, attr, attr_mask)) return EINVAL;
  if (next == IBV_QPS_RESET) {
    reset(q);
  } else {
    copy_attrs(q, attr, attr_mask);
  }
  if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    resolve_remote(q, q->attr.ah_attr);
    q->expected_psn = q->attr.rq_psn;
  }
  if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    q->next_psn = q->attr.sq_psn;
    q->retries_left = q->attr.retry_cnt;
    q->rnr_retries_left = q->attr.rnr_retry;
  }
  q->verbs.state = next;
  q->attr.qp_state = next;
  q->attr.cur_qp_state = next;
  if (next == IBV_QPS_ERR) wake(e);  // the service thread flushes the queues
  return 0;
}

ZIP_EMU_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int /*attr_mask*/,
                                ibv_qp_init_attr* init_attr) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Qp* q = find(e, qp);
  if (!q) return EINVAL;
  if (q->ctx->lost) return EIO;
  // Like providers, everything is reported whatever the mask asks for.
  *attr = q->attr;
  attr->qp_state = attr->cur_qp_state = q->verbs.state;
  attr->cap = q->cap;
  std::memset(init_attr, 0, sizeof(*init_attr));
  init_attr->qp_context = q->verbs.qp_context;
  init_attr->send_cq = q->verbs.send_cq;
  init_attr->recv_cq = q->verbs.recv_cq;
  init_attr->cap = q->cap;
  init_attr->qp_type = IBV_QPT_RC;
  init_attr->sq_sig_all = q->sig_all;
  return 0;
}

ZIP_EMU_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Qp* q = find(e, qp);
  if (!q) return EINVAL;
  drop_qp(e, q);
  return 0;
}

namespace zipccl::verbs::emu {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Emu& e = emu();
  std::unique_lock<std::mutex> lock(e.mu);
  Qp* q = find(e, qp);
  int err = 0;
  if (!q) {
    err = EINVAL;
  } else if (q->ctx->lost) {
    err = EIO;
  } else if (q->verbs.state != IBV_QPS_RTS && q->verbs.state != IBV_QPS_ERR) {
    err = EINVAL;  // ERR accepts WRs and flushes them
  }
  if (err) {
    *bad_wr = wr;
    return err;
  }
  Context* ctx = q->ctx;
  const FaultPlan& f = ctx->faults;
  Clock::time_point now = Clock::now();
  for (ibv_send_wr* w = wr; w; w = w->next) {
    uint64_t length = 0;
    if ((err = check_send_wr(q, w, &length))) {
      *bad_wr = w;
      break;
    }
    SendWr s;
    s.wr_id = w->wr_id;
    s.opcode = w->opcode;
    s.signaled = q->sig_all || (w->send_flags & IBV_SEND_SIGNALED);
    s.imm = w->imm_data;
    s.remote_addr = w->wr.rdma.remote_addr;
    s.rkey = w->wr.rdma.rkey;
    s.length = length;
    s.is_inline = w->send_flags & IBV_SEND_INLINE;
    if (s.is_inline) {
      // The caller may reuse the buffers as soon as this returns: copy now, without keys.
      s.inline_data.resize(length);
      char* dst = s.inline_data.data();
      for (int i = 0; i < w->num_sge; ++i) {
        if (!w->sg_list[i].length) continue;
        std::memcpy(dst, reinterpret_cast<const void*>(w->sg_list[i].addr), w->sg_list[i].length);
        dst += w->sg_list[i].length;
      }
    } else {
      s.sges.assign(w->sg_list, w->sg_list + w->num_sge);
    }
    s.index = q->sq_posted++;
    s.psn = q->next_psn;
    q->next_psn = (q->next_psn + 1) & kPsnMask;
    uint64_t n = ++ctx->posted;
    switch (w->opcode) {
      case IBV_WR_SEND:
      case IBV_WR_SEND_WITH_IMM: ++q->sends; break;
      case IBV_WR_RDMA_WRITE: ++q->writes; break;
      case IBV_WR_RDMA_WRITE_WITH_IMM: ++q->writes_imm; break;
      case IBV_WR_RDMA_READ: ++q->reads; break;
      default: break;
    }
    if (is_rdma(w->opcode)) s.fault_rkey = ++ctx->rdma_posted == f.rkey;
    s.fault_lost = n == f.retry;
    s.fault_qp_error = n == f.qp_error;
    s.fault_device_lost = ++e.posted == f.device_lost;
    s.eligible = now;
    if (f.delay_us) s.eligible += std::chrono::microseconds(e.rng() % (f.delay_us + 1));
    s.eligible = std::max(s.eligible, q->last_eligible);
    q->last_eligible = s.eligible;
    q->sq.push_back(std::move(s));
  }
  wake(e);
  return err;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Qp* q = find(e, qp);
  int err = 0;
  if (!q) {
    err = EINVAL;
  } else if (q->ctx->lost) {
    err = EIO;
  } else if (q->verbs.state == IBV_QPS_RESET) {
    err = EINVAL;
  }
  if (err) {
    *bad_wr = wr;
    return err;
  }
  for (ibv_recv_wr* w = wr; w; w = w->next) {
    if (w->num_sge < 0 || static_cast<uint32_t>(w->num_sge) > q->cap.max_recv_sge) {
      err = EINVAL;
    } else if (q->rq_posted - q->rq_released >= q->cap.max_recv_wr) {
      err = ENOMEM;
    }
    if (err) {
      *bad_wr = w;
      break;
    }
    ++q->rq_posted;
    q->rq.push_back(RecvWr{w->wr_id, std::vector<ibv_sge>(w->sg_list, w->sg_list + w->num_sge)});
  }
  if (q->verbs.state == IBV_QPS_ERR) wake(e);  // flushed at once
  return err;
}

}  // namespace zipccl::verbs::emu
