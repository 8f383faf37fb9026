#include "emu_harness.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace zipccl::verbs::emu_test {

const IbvFunctions& ibv() {
  static const IbvLibrary* lib = [] {
    std::string error;
    auto l = load_ibverbs(ZIP_VERBS_EMU_LIB, &error);
    if (!l) {
      std::fprintf(stderr, "cannot load the emulation: %s\n", error.c_str());
      std::abort();
    }
    return l.release();  // kept for the process's lifetime, as the plugin keeps libibverbs
  }();
  return lib->fn();
}

std::string format_address(const Address& a) {
  char gid[33];
  for (int i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", a.gid.raw[i]);
  char text[160];
  std::snprintf(text, sizeof(text), "%u %u %s %" PRIu64 " %u %u", a.qpn, a.lid, gid, a.addr,
                a.rkey, a.psn);
  return text;
}

bool parse_address(const std::string& text, Address* a) {
  char gid[33];
  unsigned lid;
  if (std::sscanf(text.c_str(), "%u %u %32s %" SCNu64 " %u %u", &a->qpn, &lid, gid, &a->addr,
                  &a->rkey, &a->psn) != 6 ||
      std::strlen(gid) != 32) {
    return false;
  }
  a->lid = static_cast<uint16_t>(lid);
  for (int i = 0; i < 16; ++i) {
    unsigned byte;
    if (std::sscanf(gid + 2 * i, "%2x", &byte) != 1) return false;
    a->gid.raw[i] = static_cast<uint8_t>(byte);
  }
  return true;
}

std::unique_ptr<Endpoint> Endpoint::create(const EndpointOptions& o, std::string* error) {
  const IbvFunctions& f = ibv();
  std::unique_ptr<Endpoint> ep(new Endpoint);
  ep->opt_ = o;
  auto fail = [&](const std::string& what) {
    *error = what + ": " + std::strerror(errno);
    return nullptr;
  };
  int n = 0;
  ep->list_ = f.get_device_list(&n);
  if (!ep->list_) return fail("get_device_list");
  ibv_device* dev = nullptr;
  for (int i = 0; i < n && !dev; ++i) {
    if (!o.device || std::strcmp(f.get_device_name(ep->list_[i]), o.device) == 0) dev = ep->list_[i];
  }
  if (!dev) {
    errno = ENODEV;
    return fail("no device");
  }
  if (!(ep->ctx_ = f.open_device(dev))) return fail("open_device");
  if (int rc = f.query_port(ep->ctx_, o.port, &ep->port_)) {
    errno = rc;
    return fail("query_port");
  }
  int gid_index = ep->port_.link_layer == IBV_LINK_LAYER_ETHERNET ? 3 : o.gid_index;
  if (f.query_gid(ep->ctx_, o.port, gid_index, &ep->gid_) != 0) return fail("query_gid");
  if (!(ep->pd_ = f.alloc_pd(ep->ctx_))) return fail("alloc_pd");
  if (!(ep->cq_ = f.create_cq(ep->ctx_, o.cqe, nullptr, nullptr, 0))) return fail("create_cq");
  ep->buf_.assign(o.buffer_bytes, 0);
  if (!(ep->mr_ = f.reg_mr(ep->pd_, ep->buf_.data(), ep->buf_.size(), o.mr_access))) {
    return fail("reg_mr");
  }
  ibv_qp_init_attr init{};
  init.send_cq = ep->cq_;
  init.recv_cq = ep->cq_;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = o.sig_all;
  init.cap = {o.max_send_wr, o.max_recv_wr, o.max_sge, o.max_sge, o.max_inline};
  if (!(ep->qp_ = f.create_qp(ep->pd_, &init))) return fail("create_qp");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = o.port;
  a.qp_access_flags = o.qp_access;
  if (int rc = f.modify_qp(ep->qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    errno = rc;
    return fail("modify_qp(INIT)");
  }
  return ep;
}

Endpoint::~Endpoint() {
  const IbvFunctions& f = ibv();
  if (qp_) f.destroy_qp(qp_);
  if (mr_) f.dereg_mr(mr_);
  if (cq_) f.destroy_cq(cq_);
  if (pd_) f.dealloc_pd(pd_);
  if (ctx_) f.close_device(ctx_);
  if (list_) f.free_device_list(list_);
}

Address Endpoint::address() const {
  Address a;
  a.qpn = qp_->qp_num;
  a.lid = port_.lid;
  a.gid = gid_;
  a.addr = addr();
  a.rkey = mr_->rkey;
  a.psn = opt_.psn >= 0 ? uint32_t(opt_.psn) : qp_->qp_num & 0xFFFFFF;  // any value both sides agree on
  return a;
}

int Endpoint::connect(const Address& remote) {
  const IbvFunctions& f = ibv();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = opt_.min_rnr_timer;
  a.ah_attr.port_num = opt_.port;
  if (opt_.use_grh || port_.link_layer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = remote.gid;
    a.ah_attr.grh.sgid_index = port_.link_layer == IBV_LINK_LAYER_ETHERNET ? 3 : opt_.gid_index;
    a.ah_attr.grh.hop_limit = 255;
  } else {
    a.ah_attr.dlid = remote.lid;
  }
  if (int rc = f.modify_qp(qp_, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return rc;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = address().psn;
  a.timeout = opt_.timeout;
  a.retry_cnt = opt_.retry_cnt;
  a.rnr_retry = opt_.rnr_retry;
  a.max_rd_atomic = 4;
  return f.modify_qp(qp_, &a,
                     IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

int post_sges(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, ibv_sge* sges, int n, unsigned flags,
              uint64_t remote_addr, uint32_t rkey, uint32_t imm) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sges;
  wr.num_sge = n;
  wr.opcode = op;
  wr.send_flags = flags;
  wr.imm_data = imm;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int post_recv_sges(ibv_qp* qp, uint64_t wr_id, ibv_sge* sges, int n) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sges;
  wr.num_sge = n;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

int Endpoint::post(ibv_wr_opcode op, uint64_t wr_id, size_t offset, size_t len, bool signaled,
                   uint64_t remote_addr, uint32_t rkey, uint32_t imm) {
  ibv_sge sge{addr(offset), static_cast<uint32_t>(len), mr_->lkey};
  return post_sges(qp_, op, wr_id, &sge, 1, signaled ? IBV_SEND_SIGNALED : 0, remote_addr, rkey, imm);
}

int Endpoint::post_recv(uint64_t wr_id, size_t offset, size_t len) {
  ibv_sge sge{addr(offset), static_cast<uint32_t>(len), mr_->lkey};
  return post_recv_sges(qp_, wr_id, &sge, 1);
}

std::vector<ibv_wc> Endpoint::poll(size_t n, std::chrono::milliseconds timeout) {
  std::vector<ibv_wc> out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  ibv_wc wc[16];
  while (out.size() < n) {
    int got = ibv_poll_cq(cq_, static_cast<int>(std::min<size_t>(16, n - out.size())), wc);
    if (got < 0) break;
    out.insert(out.end(), wc, wc + got);
    if (got == 0) {
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return out;
}

uint64_t fnv1a(const void* data, size_t len) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace zipccl::verbs::emu_test
