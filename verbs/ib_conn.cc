#include "ib_conn.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "ib_errors.h"
#include "ib_qp.h"
#include "log.h"
#include "port_info.h"
#include "sysfs.h"
#include "tcp_bootstrap.h"

namespace zipccl::verbs {
namespace {

constexpr uint32_t kCtrlSlots = 64;   // control records in flight per direction (credits)
constexpr size_t kCtrlRecord = 512;   // largest control record (the engine's Cts is 464 bytes)
constexpr uint32_t kSendDepth = 256;  // send work requests per QP
constexpr size_t kChunk = 256 << 10;  // bytes per RDMA write
constexpr size_t kMinPart = 64 << 10; // a transfer spreads over QPs only in parts this large
constexpr size_t kLine = 128;         // parts are whole LL128 lines
constexpr int kPollBatch = 32;
// Mailbox writes (credits, 32-byte advertisements) and data headers go inline where the provider
// allows: the HCA takes the bytes from the work request instead of a second DMA read.
constexpr uint32_t kWantInline = 64;
constexpr uint32_t kFlushDepth = 64;  // flushes in flight (NCCL has at most 32 requests per comm)
constexpr int64_t kPeerCheckMs = 20;  // how often the bootstrap socket is looked at
// After the peer's socket closes, completions it caused may still be on their way (its close
// does not wait for them); whatever is still outstanding after this fails.
constexpr int64_t kGoneGraceMs = 200;

uint32_t recv_depth(uint32_t qp) { return kFifoSlots + (qp == 0 ? kCtrlSlots : 0); }

// Both ends split a transfer of n bytes the same way: this many parts of part_len bytes (the
// last may be shorter), part p on QP p.
struct Split {
  uint32_t parts;
  size_t part_len;
};
Split split(size_t n, uint32_t nqps) {
  const size_t want = std::max<size_t>(1, std::min<size_t>(nqps, (n + kMinPart - 1) / kMinPart));
  const size_t part_len = ((n + want - 1) / want + kLine - 1) / kLine * kLine;
  return Split{uint32_t((n + part_len - 1) / part_len), part_len};
}

// Work request ids: what completed, on which QP, and which slot or transfer.
enum WrKind : uint64_t { kWrCtrl = 1, kWrAdvert, kWrCredit, kWrData, kWrRecv };
uint64_t wr_id(WrKind k, uint32_t qp, uint64_t v) { return uint64_t(k) << 56 | uint64_t(qp) << 48 | v; }
WrKind wr_kind(uint64_t id) { return WrKind(id >> 56); }
uint32_t wr_qp(uint64_t id) { return uint32_t(id >> 48) & 0xFF; }
uint32_t wr_value(uint64_t id) { return uint32_t(id); }

template <typename T>
T* alloc_pages(size_t* bytes) {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  *bytes = (sizeof(T) + page - 1) / page * page;
  void* p = std::aligned_alloc(page, *bytes);
  if (p) std::memset(p, 0, *bytes);
  return static_cast<T*>(p);
}

class IbMemReg : public MemReg {
 public:
  explicit IbMemReg(MrRef r) : ref_(std::move(r)) {}

 private:
  MrRef ref_;
};

// The GID this end is addressed by, chosen as NCCL does (verbs/port_info). Each query reads
// sysfs, so on IB only the two entries the choice looks at are read, as NCCL does.
void choose_gid(const IbvFunctions& fn, ibv_context* ctx, const std::string& dev, int port,
                const ibv_port_attr& attr, int* index, uint8_t gid[16]) {
  const GidPolicy policy = gid_policy_from_env();
  const bool roce = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  std::vector<GidEntry> table(size_t(std::max(1, attr.gid_tbl_len)));
  for (size_t i = 0; i < table.size(); ++i) {
    table[i].roce_version = -1;
    if (!roce && i != 0 && int(i) != policy.routable_flid_index) continue;
    ibv_gid g;
    std::memset(&g, 0, sizeof g);
    fn.query_gid(ctx, uint8_t(port), int(i), &g);  // an index that fails stays unset (skipped)
    std::memcpy(table[i].raw, g.raw, 16);
    if (roce) table[i].roce_version = gid_roce_version("", dev, port, int(i));
  }
  *index = select_gid_index(attr.link_layer, table, policy);
  if (*index < 0 || size_t(*index) >= table.size()) *index = 0;
  std::memcpy(gid, table[size_t(*index)].raw, 16);
}

}  // namespace

struct IbConn::Local {
  Mailbox outbox;  // sources of the RDMA writes into the peer's mailbox
  uint64_t flush_sink;  // where flush reads land
  char ctrl_tx[kCtrlSlots][kCtrlRecord];
  char ctrl_rx[kCtrlSlots + kFifoSlots][kCtrlRecord];
};

// ---- setup --------------------------------------------------------------------------------------

ncclResult_t IbConn::create(const IbPort& port, int nqps, int traffic_class, std::unique_ptr<IbConn>* out) {
  std::unique_ptr<IbConn> c(new IbConn);
  c->traffic_class_ = traffic_class;
  c->hca_ = port.hca;
  c->mrs_ = port.mrs;
  c->port_ = port.port;
  c->attr_ = port.attr;
  c->dev_ = port.hca->name() + ":" + std::to_string(port.port);
  const IbvFunctions& fn = c->hca_->fn();
  const char* dev = c->dev_.c_str();
  choose_gid(fn, c->hca_->context(), c->hca_->name(), c->port_, c->attr_, &c->gid_index_, c->gid_);

  int cqe = 0;
  for (int q = 0; q < nqps; ++q) cqe += int(kSendDepth + recv_depth(uint32_t(q)));
  c->cq_ = fn.create_cq(c->hca_->context(), cqe, nullptr, nullptr, 0);
  if (!c->cq_) {
    ZIP_WARN("%s: ibv_create_cq(%d) failed: %s", dev, cqe, std::strerror(errno));
    return ncclSystemError;
  }
  c->hca_->watch(c->cq_, c->err_);
  for (int q = 0; q < nqps; ++q) {
    uint32_t inl = 0;
    ibv_qp* qp = create_rc_qp(fn, c->hca_->pd(), c->cq_, kSendDepth, recv_depth(uint32_t(q)), dev, kWantInline, &inl);
    if (!qp) return ncclSystemError;
    if (q == 0) c->max_inline_ = inl;  // control and mailbox writes go on QP 0
    c->qps_.push_back(qp);
    c->sq_used_.push_back(0);
    c->hca_->watch(qp, c->err_);
    ZIP_CHECK(qp_to_init(fn, qp, c->port_, dev));
  }

  size_t inbox_bytes = 0, local_bytes = 0;
  c->inbox_ = alloc_pages<Mailbox>(&inbox_bytes);
  c->local_ = alloc_pages<Local>(&local_bytes);
  if (!c->inbox_ || !c->local_) {
    ZIP_WARN("%s: out of memory for connection buffers", dev);
    return ncclSystemError;
  }
  // Only the mailbox is open to the peer's writes.
  c->inbox_mr_ = fn.reg_mr(c->hca_->pd(), c->inbox_, inbox_bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  c->local_mr_ = fn.reg_mr(c->hca_->pd(), c->local_, local_bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!c->inbox_mr_ || !c->local_mr_) {
    ZIP_WARN("%s: registering connection buffers failed: %s", dev, std::strerror(errno));
    return ncclSystemError;
  }
  *out = std::move(c);
  return ncclSuccess;
}

IbConn::~IbConn() {
  const IbvFunctions& fn = hca_->fn();
  // Queue pairs first: once they are gone nothing writes into our buffers or reads NCCL's, so the
  // registrations (released with sends_/recvs_ after this body) and the buffers can go.
  for (ibv_qp* qp : qps_) {
    hca_->unwatch(qp);
    fn.destroy_qp(qp);
  }
  if (flush_qp_) {
    hca_->unwatch(flush_qp_);
    fn.destroy_qp(flush_qp_);
  }
  for (ibv_cq* cq : {cq_, flush_cq_}) {
    if (!cq) continue;
    hca_->unwatch(cq);
    fn.destroy_cq(cq);
  }
  if (inbox_mr_) fn.dereg_mr(inbox_mr_);
  if (local_mr_) fn.dereg_mr(local_mr_);
  std::free(inbox_);
  std::free(local_);
  if (fd_ >= 0) close(fd_);
}

void IbConn::local_info(QpInfo* info) const {
  info->nqps = uint16_t(qps_.size());
  for (size_t q = 0; q < qps_.size(); ++q) info->qpn[q] = qps_[q]->qp_num;
  std::memcpy(info->gid, gid_, 16);
  info->lid = attr_.lid;
  info->link_layer = attr_.link_layer;
  info->mtu = uint8_t(attr_.active_mtu);
  info->gid_index = uint32_t(gid_index_);
  info->mailbox_addr = reinterpret_cast<uintptr_t>(inbox_);
  info->mailbox_rkey = inbox_mr_->rkey;
  info->traffic_class = uint32_t(traffic_class_ + 1);
}

ncclResult_t IbConn::connect_qps(const QpInfo& remote, const std::string& peer) {
  peer_ = peer;
  const char* dev = dev_.c_str();
  if (remote.nqps != qps_.size() || remote.link_layer != attr_.link_layer) {
    ZIP_WARN("%s: peer %s has %u QPs on a %s port, we have %zu on a %s port", dev, peer.c_str(), remote.nqps,
             link_layer_name(remote.link_layer), qps_.size(), link_layer_name(attr_.link_layer));
    return ncclInvalidUsage;
  }
  int mtu = std::min(int(attr_.active_mtu), int(remote.mtu));
  if (ib_mtu()) mtu = std::min(mtu, int(mtu_from_bytes(ib_mtu())));
  const QpPath path{port_, attr_.link_layer, gid_index_, gid_, ibv_mtu(mtu), traffic_class_};
  for (size_t q = 0; q < qps_.size(); ++q) {
    QpPeer p{remote.qpn[q], remote.lid, {}};
    std::memcpy(p.gid, remote.gid, 16);
    ZIP_CHECK(qp_to_rts(hca_->fn(), qps_[q], path, p, dev));
    for (uint32_t s = 0; s < recv_depth(uint32_t(q)); ++s) ZIP_CHECK(post_receive(uint32_t(q), s));
  }
  peer_mailbox_ = remote.mailbox_addr;
  peer_mailbox_rkey_ = remote.mailbox_rkey;
  ZIP_INFO(NCCL_NET | NCCL_INIT,
           "%s: %zu QP%s to %s, MTU %d, %s, GID index %d (peer's %u), traffic class %d, inline %u bytes", dev,
           qps_.size(), qps_.size() > 1 ? "s" : "", peer.c_str(), mtu_bytes(ibv_mtu(mtu)),
           link_layer_name(attr_.link_layer), gid_index_, remote.gid_index,
           traffic_class_ >= 0 ? traffic_class_ : ib_tc(), max_inline_);
  return ncclSuccess;
}

void IbConn::attach(int fd) {
  fd_ = fd;
  next_check_ms_ = now_ms() + kPeerCheckMs;
}

ncclResult_t IbConn::reg_mem(void* data, size_t size, std::unique_ptr<MemReg>* out) {
  MrRef r;
  ZIP_CHECK(mrs_->acquire(data, size, &r));
  *out = std::make_unique<IbMemReg>(std::move(r));
  return ncclSuccess;
}

ncclResult_t IbConn::reg_device_mem(void* data, size_t size, int dmabuf_fd, uint64_t offset, bool for_receives,
                              std::unique_ptr<MemReg>* out) {
  MrRef r;
  ZIP_CHECK(mrs_->acquire(data, size, &r, DmaBuf{dmabuf_fd, offset}));
  if (for_receives && !flush_qp_) ZIP_CHECK(create_flush_qp());
  *out = std::make_unique<IbMemReg>(std::move(r));
  return ncclSuccess;
}

ncclResult_t IbConn::create_flush_qp() {
  const IbvFunctions& fn = hca_->fn();
  const char* dev = dev_.c_str();
  flush_cq_ = fn.create_cq(hca_->context(), int(kFlushDepth), nullptr, nullptr, 0);
  if (!flush_cq_) {
    ZIP_WARN("%s: ibv_create_cq(%u) for the GPUDirect flush failed: %s", dev, kFlushDepth, std::strerror(errno));
    return ncclSystemError;
  }
  hca_->watch(flush_cq_, err_);
  flush_qp_ = create_rc_qp(fn, hca_->pd(), flush_cq_, kFlushDepth, 1, dev);
  if (!flush_qp_) return ncclSystemError;
  hca_->watch(flush_qp_, err_);
  ZIP_CHECK(qp_to_init(fn, flush_qp_, port_, dev));
  const QpPath path{port_, attr_.link_layer, gid_index_, gid_, attr_.active_mtu, traffic_class_};
  QpPeer self{flush_qp_->qp_num, attr_.lid, {}};
  std::memcpy(self.gid, gid_, 16);
  return qp_to_rts(fn, flush_qp_, path, self, dev);
}

ncclResult_t IbConn::flush(const void* data, Xfer* x) {
  if (err_->code() != ncclSuccess) return err_->code();
  if (!flush_qp_ || flushes_.size() >= kFlushDepth)
    return fail_with(ncclInternalError, flush_qp_ ? "too many flushes in flight" : "flush of memory not registered for it");
  MrRef mr;  // the buffer's registration, held until the read is done
  if (mrs_->acquire(data, 1, &mr) != ncclSuccess) return fail_with(ncclSystemError, "could not register a flushed buffer");
  ibv_sge sge{reinterpret_cast<uintptr_t>(&local_->flush_sink), 1, local_mr_->lkey};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data);
  wr.wr.rdma.rkey = mr.rkey();
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(flush_qp_, &wr, &bad))
    return fail_with(ncclSystemError, std::string("ibv_post_send (flush) failed: ") + std::strerror(e));
  x->pending.store(1, std::memory_order_relaxed);
  flushes_.push_back(FlushOp{x, std::move(mr)});
  return ncclSuccess;
}

ncclResult_t IbConn::on_flush_completion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS)
    return fail_with(completion_error_code(wc.status), "GPUDirect flush failed: " + describe_completion_error(hca_->fn(), wc));
  if (flushes_.empty()) return fail_with(ncclInternalError, "completion for no flush");
  flushes_.front().x->pending.store(0, std::memory_order_release);
  flushes_.pop_front();
  return ncclSuccess;
}

// ---- progress -----------------------------------------------------------------------------------

ncclResult_t IbConn::fail_with(ncclResult_t code, const std::string& why) {
  err_->set(code, dev_ + " " + peer_ + ": " + why);
  return err_->code();
}

template <typename F>
ncclResult_t IbConn::drain(ibv_cq* cq, F on_wc) {
  ibv_wc wcs[kPollBatch];
  for (;;) {
    const int n = ibv_poll_cq(cq, kPollBatch, wcs);
    if (n < 0) return fail_with(ncclSystemError, "ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) ZIP_CHECK(on_wc(wcs[i]));
    if (n < kPollBatch) return ncclSuccess;
  }
}

ncclResult_t IbConn::pump() {
  if (err_->code() != ncclSuccess) return err_->code();
  if (hca_->fatal()) return fail_with(ncclSystemError, "the device failed (fatal asynchronous event)");
  ZIP_CHECK(drain(cq_, [this](const ibv_wc& wc) { return on_completion(wc); }));
  if (flush_cq_) ZIP_CHECK(drain(flush_cq_, [this](const ibv_wc& wc) { return on_flush_completion(wc); }));
  check_peer();
  ZIP_CHECK(flush_ctrl());
  ZIP_CHECK(send_credits());
  ZIP_CHECK(advertise());
  ZIP_CHECK(issue_sends());
  complete();
  if (err_->code() != ncclSuccess) return err_->code();
  return ncclSuccess;
}

ncclResult_t IbConn::progress() { return pump(); }

ncclResult_t IbConn::on_completion(const ibv_wc& wc) {
  const WrKind kind = wr_kind(wc.wr_id);
  const uint32_t qp = wr_qp(wc.wr_id);
  if (qp >= qps_.size()) return fail_with(ncclInternalError, "completion for an unknown work request");
  if (kind != kWrRecv) sq_used_[qp]--;
  if (wc.status != IBV_WC_SUCCESS) {
    const std::string why = "work completion error: " + describe_completion_error(hca_->fn(), wc);
    // A credit or advertisement write, or a receive flushed: the queue pair failed, as it does
    // when the peer closes with such writes of ours in flight (it owes us nothing more). Like the
    // bootstrap socket closing, that fails only what is still outstanding after the grace.
    if (kind == kWrCredit || kind == kWrAdvert || kind == kWrRecv) {
      peer_gone(completion_error_code(wc.status), why);
      return ncclSuccess;
    }
    // Our data or a control record is lost. A flush only says the QP had failed before.
    const bool flushed = wc.status == IBV_WC_WR_FLUSH_ERR && !gone_why_.empty();
    return fail_with(flushed ? gone_code_ : completion_error_code(wc.status), flushed ? gone_why_ : why);
  }
  switch (kind) {
    case kWrCtrl:
      ctrl_acked_++;
      return ncclSuccess;
    case kWrAdvert:
      return ncclSuccess;
    case kWrCredit:
      credit_write_out_ = false;
      return ncclSuccess;
    case kWrData: {
      const uint32_t i = sends_.empty() ? UINT32_MAX : wr_value(wc.wr_id) - sends_.front().seq;
      if (i >= sends_.size()) return fail_with(ncclInternalError, "completion for no send");
      sends_[i].wrs_out--;
      return ncclSuccess;
    }
    case kWrRecv:
      break;
    default:
      return fail_with(ncclInternalError, "completion for an unknown work request");
  }
  if (wc.opcode == IBV_WC_RECV) {
    const char* rec = local_->ctrl_rx[wr_value(wc.wr_id)];
    ctrl_in_.emplace_back(rec, wc.byte_len);
    ctrl_taken_++;
  } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    const uint32_t i = ntohl(wc.imm_data) - recv_done_;
    if (i >= advertised_ - recv_done_) return fail_with(ncclRemoteError, "data for a receive never advertised");
    RecvOp& op = recvs_[i];
    if (++op.parts_seen > split(op.n, uint32_t(qps_.size())).parts)
      return fail_with(ncclRemoteError, "more data than the receive was advertised for");
  } else {
    return fail_with(ncclInternalError, "unexpected receive opcode " + std::to_string(int(wc.opcode)));
  }
  return post_receive(qp, wr_value(wc.wr_id));
}

ncclResult_t IbConn::post(uint32_t qp, ibv_send_wr* wr) {
  wr->send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(qps_[qp], wr, &bad))
    return fail_with(ncclSystemError, std::string("ibv_post_send failed: ") + std::strerror(e));
  sq_used_[qp]++;
  return ncclSuccess;
}

ncclResult_t IbConn::post_receive(uint32_t qp, uint32_t slot) {
  // Every receive on QP 0 gets a record buffer (a SEND may take it); elsewhere only immediates
  // arrive, which need none.
  ibv_sge sge{reinterpret_cast<uintptr_t>(local_->ctrl_rx[slot]), uint32_t(kCtrlRecord), local_mr_->lkey};
  ibv_recv_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id(kWrRecv, qp, slot);
  wr.sg_list = qp == 0 ? &sge : nullptr;
  wr.num_sge = qp == 0 ? 1 : 0;
  ibv_recv_wr* bad = nullptr;
  if (const int e = ibv_post_recv(qps_[qp], &wr, &bad))
    return fail_with(ncclSystemError, std::string("ibv_post_recv failed: ") + std::strerror(e));
  return ncclSuccess;
}

ncclResult_t IbConn::write_mailbox(uint64_t id, const void* src, size_t len, size_t offset) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(src), uint32_t(len), local_mr_->lkey};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = peer_mailbox_ + offset;
  wr.wr.rdma.rkey = peer_mailbox_rkey_;
  if (len <= max_inline_) wr.send_flags = IBV_SEND_INLINE;
  return post(0, &wr);
}

ncclResult_t IbConn::flush_ctrl() {
  const uint64_t consumed = __atomic_load_n(&inbox_->ctrl_consumed, __ATOMIC_ACQUIRE);
  while (!ctrl_out_.empty() && ctrl_posted_ - consumed < kCtrlSlots && sq_used_[0] < kSendDepth) {
    const std::string& rec = ctrl_out_.front();
    char* slot = local_->ctrl_tx[ctrl_posted_ % kCtrlSlots];
    std::memcpy(slot, rec.data(), rec.size());
    ibv_sge sge{reinterpret_cast<uintptr_t>(slot), uint32_t(rec.size()), local_mr_->lkey};
    ibv_send_wr wr;
    std::memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id(kWrCtrl, 0, ctrl_posted_ % kCtrlSlots);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    if (rec.size() <= max_inline_) wr.send_flags = IBV_SEND_INLINE;
    ZIP_CHECK(post(0, &wr));
    ctrl_posted_++;
    ctrl_out_bytes_ -= rec.size();
    ctrl_out_.pop_front();
  }
  return ncclSuccess;
}

// Tells the peer how many of its records we took, once a quarter of its credits is owed: the
// peer stalls only with all kCtrlSlots owed, so an update always comes.
ncclResult_t IbConn::send_credits() {
  if (credit_write_out_ || ctrl_taken_ - ctrl_credited_ < kCtrlSlots / 4 || sq_used_[0] >= kSendDepth)
    return ncclSuccess;
  local_->outbox.ctrl_consumed = ctrl_taken_;
  ZIP_CHECK(write_mailbox(wr_id(kWrCredit, 0, 0), &local_->outbox.ctrl_consumed, sizeof(uint64_t),
                          offsetof(Mailbox, ctrl_consumed)));
  credit_write_out_ = true;
  ctrl_credited_ = ctrl_taken_;
  return ncclSuccess;
}

ncclResult_t IbConn::advertise() {
  while (advertised_ != recv_seq_ && advertised_ - recv_done_ < kFifoSlots && sq_used_[0] < kSendDepth) {
    const RecvOp& op = recvs_[advertised_ - recv_done_];
    const uint32_t slot = advertised_ % kFifoSlots;
    Advert& a = local_->outbox.fifo[slot];
    a.stamp = a.stamp_end = uint64_t(advertised_) + 1;
    a.addr = reinterpret_cast<uintptr_t>(op.buf);
    a.len = uint32_t(op.n);
    a.rkey = op.mr.rkey();
    ZIP_CHECK(write_mailbox(wr_id(kWrAdvert, 0, slot), &a, sizeof a, offsetof(Mailbox, fifo) + slot * sizeof(Advert)));
    advertised_++;
  }
  return ncclSuccess;
}

// The advertisement for op, if all of it has landed: its stamps are read around its fields.
bool IbConn::take_advert(SendOp* op) {
  Advert* a = &inbox_->fifo[op->seq % kFifoSlots];
  const uint64_t want = uint64_t(op->seq) + 1;
  if (__atomic_load_n(&a->stamp, __ATOMIC_ACQUIRE) != want) return false;
  const uint64_t addr = __atomic_load_n(&a->addr, __ATOMIC_RELAXED);
  const uint32_t len = __atomic_load_n(&a->len, __ATOMIC_RELAXED);
  const uint32_t rkey = __atomic_load_n(&a->rkey, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(&a->stamp_end, __ATOMIC_RELAXED) != want) return false;
  if (len != op->n) {
    fail_with(ncclRemoteError, "the receiver posted " + std::to_string(len) + " bytes for a send of " +
                                   std::to_string(op->n) + " (the two ends disagree)");
    return false;
  }
  op->raddr = addr;
  op->rkey = rkey;
  op->started = true;
  return true;
}

ncclResult_t IbConn::issue(SendOp* op) {
  const Split s = split(op->n, uint32_t(qps_.size()));
  bool all = true;
  for (uint32_t p = 0; p < s.parts; ++p) {
    const size_t begin = p * s.part_len, end = std::min(op->n, begin + s.part_len);
    while (begin + op->done[p] < end && sq_used_[p] < kSendDepth) {
      const size_t off = begin + op->done[p], len = std::min(kChunk, end - off);
      const bool last = off + len == end;
      ibv_sge sge{reinterpret_cast<uintptr_t>(op->buf + off), uint32_t(len), op->mr.lkey()};
      ibv_send_wr wr;
      std::memset(&wr, 0, sizeof wr);
      wr.wr_id = wr_id(kWrData, p, op->seq);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      wr.imm_data = htonl(op->seq);
      wr.wr.rdma.remote_addr = op->raddr + off;
      wr.wr.rdma.rkey = op->rkey;
      ZIP_CHECK(post(p, &wr));
      op->done[p] += len;
      op->wrs_out++;
    }
    all &= begin + op->done[p] == end;
  }
  op->issued = all;
  return ncclSuccess;
}

// Sends start in posting order (the k-th waits for the k-th advertisement); a QP carries one
// send's work requests before the next one's.
ncclResult_t IbConn::issue_sends() {
  while (issue_seq_ != send_seq_) {
    SendOp& op = sends_[issue_seq_ - sends_.front().seq];
    if (!op.started && !take_advert(&op)) break;
    ZIP_CHECK(issue(&op));
    if (!op.issued) break;
    issue_seq_++;
  }
  return ncclSuccess;
}

void IbConn::complete() {
  while (!sends_.empty() && sends_.front().issued && sends_.front().wrs_out == 0) {
    sends_.front().x->pending.fetch_sub(1, std::memory_order_release);
    sends_.pop_front();
  }
  while (!recvs_.empty() && recvs_.front().parts_seen == split(recvs_.front().n, uint32_t(qps_.size())).parts) {
    recvs_.front().x->pending.fetch_sub(1, std::memory_order_release);
    recvs_.pop_front();
    recv_done_++;
  }
}

// The peer sends nothing on the bootstrap socket after the handshake: reading it costs a syscall,
// so it is looked at every kPeerCheckMs, and its end (or any byte) means the peer has gone.
// Whatever is outstanding kGoneGraceMs after the peer went fails.
void IbConn::check_peer() {
  const int64_t now = now_ms();
  if (fd_ >= 0 && gone_ms_ < 0 && now >= next_check_ms_) {
    next_check_ms_ = now + kPeerCheckMs;
    char b;
    const ssize_t r = ::recv(fd_, &b, 1, MSG_DONTWAIT);
    if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      peer_gone(ncclRemoteError, "the peer closed the connection");
  }
  if (gone_ms_ >= 0 && now - gone_ms_ >= kGoneGraceMs && (!sends_.empty() || !recvs_.empty() || ctrl_backlog()))
    fail_with(gone_code_, gone_why_ + " with " + std::to_string(sends_.size()) + " sends and " +
                              std::to_string(recvs_.size()) + " receives outstanding");
}

void IbConn::peer_gone(ncclResult_t code, const std::string& why) {
  if (gone_ms_ >= 0) return;
  gone_ms_ = now_ms();
  gone_code_ = code;
  gone_why_ = why;
}

bool IbConn::peer_closed() const {
  return gone_ms_ >= 0 && now_ms() - gone_ms_ >= kGoneGraceMs && ctrl_in_.empty();
}

// ---- the engine's calls -------------------------------------------------------------------------

ncclResult_t IbConn::send_ctrl(const void* rec, size_t len) {
  if (len > kCtrlRecord) return fail_with(ncclInternalError, "control record of " + std::to_string(len) + " bytes");
  ctrl_out_.emplace_back(static_cast<const char*>(rec), len);
  ctrl_out_bytes_ += len;
  return pump();
}

ncclResult_t IbConn::recv_ctrl(void* buf, size_t cap, size_t* len) {
  *len = 0;
  ZIP_CHECK(pump());
  if (ctrl_in_.empty()) return ncclSuccess;
  const std::string& rec = ctrl_in_.front();
  if (rec.size() > cap)
    return fail_with(ncclRemoteError, "control record of " + std::to_string(rec.size()) + " bytes");
  std::memcpy(buf, rec.data(), rec.size());
  *len = rec.size();
  ctrl_in_.pop_front();
  return ncclSuccess;
}

ncclResult_t IbConn::post_send(const void* buf, size_t n, Xfer* x) {
  if (err_->code() != ncclSuccess) return err_->code();
  if (n == 0) return ncclSuccess;
  if (n > UINT32_MAX) return fail_with(ncclInvalidUsage, "transfer of " + std::to_string(n) + " bytes");
  MrRef mr;
  if (mrs_->acquire(buf, n, &mr) != ncclSuccess) return fail_with(ncclSystemError, "could not register a send buffer");
  sends_.push_back(SendOp{static_cast<const char*>(buf), n, x, send_seq_++, std::move(mr)});
  x->pending.fetch_add(1, std::memory_order_relaxed);
  return pump();
}

ncclResult_t IbConn::post_recv(void* buf, size_t n, Xfer* x) {
  if (err_->code() != ncclSuccess) return err_->code();
  if (n == 0) return ncclSuccess;
  if (n > UINT32_MAX) return fail_with(ncclInvalidUsage, "transfer of " + std::to_string(n) + " bytes");
  MrRef mr;
  if (mrs_->acquire(buf, n, &mr) != ncclSuccess) return fail_with(ncclSystemError, "could not register a receive buffer");
  recvs_.push_back(RecvOp{static_cast<char*>(buf), n, x, recv_seq_++, std::move(mr)});
  x->pending.fetch_add(1, std::memory_order_relaxed);
  return pump();
}

}  // namespace zipccl::verbs
