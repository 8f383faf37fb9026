#include "ib_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "ib_qp.h"
#include "log.h"
#include "port_info.h"
#include "sysfs.h"
#include "tcp_bootstrap.h"

namespace zipccl::verbs {
namespace {

// Clear-to-send writes of one receive go inline where the provider allows: the HCA takes the bytes
// from the work request instead of a second DMA read.
constexpr uint32_t kWantInline = 64;
constexpr int64_t kPeerCheckMs = 20;  // how often the bootstrap socket is looked at
// After the peer's socket closes, completions it caused may still be on their way (its close
// does not wait for them); whatever is still outstanding after this fails.
constexpr int64_t kGoneGraceMs = 200;

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

// ---- setup --------------------------------------------------------------------------------------

ncclResult_t IbLink::create(const IbPort& port, int nqps, int traffic_class, std::unique_ptr<IbLink>* out) {
  std::unique_ptr<IbLink> c(new IbLink);
  c->traffic_class_ = traffic_class;
  c->hca_ = port.hca;
  c->mrs_ = port.mrs;
  c->port_ = port.port;
  c->attr_ = port.attr;
  c->dev_ = port.hca->name() + ":" + std::to_string(port.port);
  const IbvFunctions& fn = c->hca_->fn();
  const char* dev = c->dev_.c_str();
  choose_gid(fn, c->hca_->context(), c->hca_->name(), c->port_, c->attr_, &c->gid_index_, c->gid_);

  const int cqe = nqps * int(kSendDepth + kRecvDepth);
  c->cq_ = fn.create_cq(c->hca_->context(), cqe, nullptr, nullptr, 0);
  if (!c->cq_) {
    ZIP_WARN("%s: ibv_create_cq(%d) failed: %s", dev, cqe, std::strerror(errno));
    return ncclSystemError;
  }
  c->hca_->watch(c->cq_, c->err_);
  for (int q = 0; q < nqps; ++q) {
    uint32_t inl = 0;
    ibv_qp* qp = create_rc_qp(fn, c->hca_->pd(), c->cq_, kSendDepth, kRecvDepth, dev, kWantInline, &inl);
    if (!qp) return ncclSystemError;
    if (q == 0) c->max_inline_ = inl;  // clear-to-sends go on QP 0
    c->qps_.push_back(qp);
    c->sq_used_.push_back(0);
    c->hca_->watch(qp, c->err_);
    ZIP_CHECK(qp_to_init(fn, qp, c->port_, dev));
  }

  size_t inbox_bytes = 0, local_bytes = 0;
  c->inbox_ = alloc_pages<Mailbox>(&inbox_bytes);
  c->local_ = alloc_pages<Local>(&local_bytes);
  if (!c->inbox_ || !c->local_) {
    ZIP_WARN("%s: out of memory for link buffers", dev);
    return ncclSystemError;
  }
  // Only the mailbox is open to the peer's writes.
  c->inbox_mr_ = fn.reg_mr(c->hca_->pd(), c->inbox_, inbox_bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  c->local_mr_ = fn.reg_mr(c->hca_->pd(), c->local_, local_bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!c->inbox_mr_ || !c->local_mr_) {
    ZIP_WARN("%s: registering link buffers failed: %s", dev, std::strerror(errno));
    return ncclSystemError;
  }
  *out = std::move(c);
  return ncclSuccess;
}

IbLink::~IbLink() {
  const IbvFunctions& fn = hca_->fn();
  // Queue pairs first: once they are gone nothing writes into our buffers or reads NCCL's, so the
  // registrations (released with sends_ and posted_ after this body) and the buffers can go.
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

void IbLink::local_info(QpInfo* info) const {
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

ncclResult_t IbLink::connect_qps(const QpInfo& remote, const std::string& peer) {
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
    for (uint32_t s = 0; s < kRecvDepth; ++s) ZIP_CHECK(post_receive(uint32_t(q)));
  }
  peer_mailbox_ = remote.mailbox_addr;
  peer_mailbox_rkey_ = remote.mailbox_rkey;
  ZIP_INFO(NCCL_NET | NCCL_INIT,
           "%s: %zu QP%s to %s, MTU %d, %s, GID index %d (peer's %u), traffic class %d, inline %u bytes", dev,
           qps_.size(), qps_.size() > 1 ? "s" : "", peer.c_str(), mtu_bytes(ibv_mtu(mtu)),
           link_layer_name(attr_.link_layer), gid_index_, remote.gid_index,
           traffic_class_ >= 0 ? traffic_class_ : int(ib_tc()), max_inline_);
  return ncclSuccess;
}

void IbLink::attach(int fd) {
  fd_ = fd;
  next_check_ms_ = now_ms() + kPeerCheckMs;
}

// ---- registration -------------------------------------------------------------------------------

ncclResult_t IbLink::reg_mem(void* data, size_t size, std::unique_ptr<MemReg>* out) {
  MrRef r;
  ZIP_CHECK(mrs_->acquire(data, size, &r));
  *out = std::make_unique<IbMemReg>(std::move(r));
  return ncclSuccess;
}

ncclResult_t IbLink::reg_device_mem(void* data, size_t size, int dmabuf_fd, uint64_t offset, bool for_receives,
                                    std::unique_ptr<MemReg>* out) {
  MrRef r;
  ZIP_CHECK(mrs_->acquire(data, size, &r, DmaBuf{dmabuf_fd, offset}));
  if (for_receives && !flush_qp_) ZIP_CHECK(create_flush_qp());
  *out = std::make_unique<IbMemReg>(std::move(r));
  return ncclSuccess;
}

// ---- failures and liveness ----------------------------------------------------------------------

ncclResult_t IbLink::fail_with(ncclResult_t code, const std::string& why) {
  err_->set(code, dev_ + " " + peer_ + ": " + why);
  return err_->code();
}

// The peer sends nothing on the bootstrap socket after the handshake: reading it costs a syscall,
// so it is looked at every kPeerCheckMs, and its end (or any byte) means the peer has gone.
// Whatever is outstanding kGoneGraceMs after the peer went fails.
void IbLink::check_peer() {
  const int64_t now = now_ms();
  if (fd_ >= 0 && gone_ms_ < 0 && now >= next_check_ms_) {
    next_check_ms_ = now + kPeerCheckMs;
    char b;
    const ssize_t r = ::recv(fd_, &b, 1, MSG_DONTWAIT);
    if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      peer_gone(ncclRemoteError, "the peer closed the connection");
  }
  const bool outstanding = !sends_.empty() || cts_posted_ != cts_written_ || !parts_.idle() ||
                           arrive_seq_ != cts_posted_;
  // Decided here, once, for peer_closed() too: its callers, testing after progress(), must not
  // see the grace over where this did not (they would fail what this fails with the reason).
  grace_over_ = gone_ms_ >= 0 && now - gone_ms_ >= kGoneGraceMs;
  if (grace_over_ && outstanding)
    fail_with(gone_code_, gone_why_ + " with " + std::to_string(sends_.size()) + " sends and " +
                              std::to_string(cts_posted_ - arrive_seq_) + " receives outstanding");
}

void IbLink::peer_gone(ncclResult_t code, const std::string& why) {
  if (gone_ms_ >= 0) return;
  gone_ms_ = now_ms();
  gone_code_ = code;
  gone_why_ = why;
}

bool IbLink::peer_closed() const { return grace_over_ && arrived_.empty(); }

}  // namespace zipccl::verbs
