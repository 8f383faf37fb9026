// The verbs link's data path (ib_link.h says how messages move): clear-to-sends written into the
// sender's mailbox and read from it, messages written into their placements, completions.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "ib_errors.h"
#include "ib_link.h"
#include "log.h"

namespace zipccl::verbs {
namespace {

constexpr size_t kChunk = 256 << 10;   // bytes per RDMA write
constexpr size_t kMinPart = 64 << 10;  // a message spreads over QPs only in parts this large
constexpr size_t kLine = 128;          // parts are whole LL128 lines
constexpr int kPollBatch = 32;

// Both ends split a message of n bytes the same way: this many parts of part_len bytes (the last
// may be shorter), part p on QP p. An empty message is one empty part.
struct Split {
  uint32_t parts;
  size_t part_len;
};
Split split(size_t n, uint32_t nqps) {
  if (n == 0) return Split{1, 0};
  const size_t want = std::max<size_t>(1, std::min<size_t>(nqps, (n + kMinPart - 1) / kMinPart));
  const size_t part_len = ((n + want - 1) / want + kLine - 1) / kLine * kLine;
  return Split{uint32_t((n + part_len - 1) / part_len), part_len};
}

// Work request ids: what completed, on which QP, and which message or clear-to-send.
enum WrKind : uint64_t { kWrCts = 1, kWrData, kWrRecv };
uint64_t wr_id(WrKind k, uint32_t qp, uint64_t v) { return uint64_t(k) << 56 | uint64_t(qp) << 48 | v; }
WrKind wr_kind(uint64_t id) { return WrKind(id >> 56); }
uint32_t wr_qp(uint64_t id) { return uint32_t(id >> 48) & 0xFF; }
uint32_t wr_value(uint64_t id) { return uint32_t(id); }

MessageHeader header_of(uint32_t seq, uint32_t sub, uint32_t imm) {
  MessageHeader h;
  h.seq = seq;
  h.sub = sub;
  h.compressed = imm & kImmCompressed;
  h.why = h.compressed ? RawWhy::kUnsaid : RawWhy(imm >> kImmRawWhyShift);
  h.wire_bytes = h.compressed ? imm & ~kImmCompressed : imm & kImmRawBytes;
  h.orig_bytes = h.compressed ? 0 : h.wire_bytes;  // a compressed message says it itself
  return h;
}

}  // namespace

// ---- progress -----------------------------------------------------------------------------------

template <typename F>
ncclResult_t IbLink::drain(ibv_cq* cq, F on_wc) {
  ibv_wc wcs[kPollBatch];
  for (;;) {
    const int n = ibv_poll_cq(cq, kPollBatch, wcs);
    if (n < 0) return fail_with(ncclSystemError, "ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) ZIP_CHECK(on_wc(wcs[i]));
    if (n < kPollBatch) return ncclSuccess;
  }
}

ncclResult_t IbLink::progress() {
  if (err_->code() != ncclSuccess) return err_->code();
  if (hca_->fatal()) return fail_with(ncclSystemError, "the device failed (fatal asynchronous event)");
  ZIP_CHECK(drain(cq_, [this](const ibv_wc& wc) { return on_completion(wc); }));
  if (flush_cq_) ZIP_CHECK(drain(flush_cq_, [this](const ibv_wc& wc) { return on_flush_completion(wc); }));
  check_peer();
  ZIP_CHECK(write_cts());
  ZIP_CHECK(issue_sends());
  complete_sends();
  return err_->code();
}

ncclResult_t IbLink::on_completion(const ibv_wc& wc) {
  const WrKind kind = wr_kind(wc.wr_id);
  const uint32_t qp = wr_qp(wc.wr_id);
  if (qp >= qps_.size()) return fail_with(ncclInternalError, "completion for an unknown work request");
  if (kind != kWrRecv) sq_used_[qp]--;
  if (wc.status != IBV_WC_SUCCESS) {
    const std::string why = "work completion error: " + describe_completion_error(hca_->fn(), wc);
    // A clear-to-send write or a receive flushed: the queue pair failed, as it does when the peer
    // closes with such writes of ours in flight (it owes us nothing more). Like the bootstrap
    // socket closing, that fails only what is still outstanding after the grace.
    if (kind == kWrCts || kind == kWrRecv) {
      peer_gone(completion_error_code(wc.status), why);
      return ncclSuccess;
    }
    // Our data is lost. A flush only says the QP had failed before.
    const bool flushed = wc.status == IBV_WC_WR_FLUSH_ERR && !gone_why_.empty();
    return fail_with(flushed ? gone_code_ : completion_error_code(wc.status), flushed ? gone_why_ : why);
  }
  switch (kind) {
    case kWrCts:
      return ncclSuccess;
    case kWrData: {
      const uint32_t i = sends_.empty() ? UINT32_MAX : wr_value(wc.wr_id) - sends_.front().seq;
      if (i >= sends_.size()) return fail_with(ncclInternalError, "completion for no send");
      sends_[i].wrs_out--;
      return ncclSuccess;
    }
    case kWrRecv:
      if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM)
        return fail_with(ncclRemoteError, "protocol error: the peer sent opcode " + std::to_string(int(wc.opcode)));
      ZIP_CHECK(post_receive(qp));
      return on_immediate(qp, ntohl(wc.imm_data));
    default:
      return fail_with(ncclInternalError, "completion for an unknown work request");
  }
}

ncclResult_t IbLink::post(uint32_t qp, ibv_send_wr* wr) {
  wr->send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(qps_[qp], wr, &bad))
    return fail_with(ncclSystemError, std::string("ibv_post_send failed: ") + std::strerror(e));
  sq_used_[qp]++;
  return ncclSuccess;
}

// Receives carry no buffer: only immediates arrive (a SEND from the peer fails the QP).
ncclResult_t IbLink::post_receive(uint32_t qp) {
  ibv_recv_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id(kWrRecv, qp, 0);
  ibv_recv_wr* bad = nullptr;
  if (const int e = ibv_post_recv(qps_[qp], &wr, &bad))
    return fail_with(ncclSystemError, std::string("ibv_post_recv failed: ") + std::strerror(e));
  return ncclSuccess;
}

// ---- receiving end ------------------------------------------------------------------------------

ncclResult_t IbLink::post_cts(const ClearToSend& cts) {
  if (err_->code() != ncclSuccess) return err_->code();
  if (cts.seq != cts_posted_ || cts.n == 0 || cts.n > kMaxRecvs || cts_posted_ - arrive_seq_ >= kFifoSlots)
    return fail_with(ncclInternalError, "clear-to-send posted out of turn");
  PostedCts& pc = posted_[cts.seq % kFifoSlots];
  pc.cts = cts;
  pc.regs.clear();
  pc.arrived = 0;
  // The slot as the sender will read it; its RDMA write is posted by write_cts().
  CtsSlot& s = local_->outbox[cts.seq % kFifoSlots];
  const uint32_t stamp = cts.seq + 1;
  s.stamp = stamp;
  s.n = cts.n;
  for (uint32_t i = 0; i < cts.n; ++i) {
    const Placement& p = cts.p[i];
    CtsEntry& e = s.e[i];
    e = CtsEntry{};
    e.tag = p.tag;
    e.capacity = p.capacity;
    e.target_addr = p.target;
    e.staging_addr = p.staging;
    e.staging_bytes = p.staging_bytes;
    for (auto [addr, bytes, key] : {std::tuple{p.target, p.capacity, &e.target_rkey},
                                    std::tuple{p.staging, p.staging_bytes, &e.staging_rkey}}) {
      if (bytes == 0) continue;
      MrRef r;
      if (mrs_->acquire(reinterpret_cast<const void*>(addr), bytes, &r) != ncclSuccess)
        return fail_with(ncclSystemError, "could not register a receive buffer");
      *key = r.rkey();
      pc.regs.push_back(std::move(r));
    }
  }
  std::memcpy(reinterpret_cast<char*>(&s) + end_stamp_offset(cts.n), &stamp, sizeof stamp);
  ++cts_posted_;
  return progress();
}

ncclResult_t IbLink::write_cts() {
  while (cts_written_ != cts_posted_ && sq_used_[0] < kSendDepth) {
    const uint32_t slot = cts_written_ % kFifoSlots;
    const CtsSlot& s = local_->outbox[slot];
    const uint32_t len = uint32_t(cts_bytes(s.n));
    ibv_sge sge{reinterpret_cast<uintptr_t>(&s), len, local_mr_->lkey};
    ibv_send_wr wr;
    std::memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id(kWrCts, 0, slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = peer_mailbox_ + offsetof(Mailbox, fifo) + slot * sizeof(CtsSlot);
    wr.wr.rdma.rkey = peer_mailbox_rkey_;
    if (len <= max_inline_) wr.send_flags = IBV_SEND_INLINE;
    ZIP_CHECK(post(0, &wr));
    ++cts_written_;
  }
  return ncclSuccess;
}

ncclResult_t IbLink::on_immediate(uint32_t qp, uint32_t imm) {
  if (qp > 0) {
    if (const char* why = parts_.part(qp, imm, placements_open()))
      return fail_with(ncclRemoteError, std::string("protocol error: ") + why + " (QP " + std::to_string(qp) + ")");
    return collect_arrivals();
  }
  // QP 0 carries every message's first part, in (seq, sub) order: this one fills the next placement.
  if (arrive_seq_ == cts_written_) return fail_with(ncclRemoteError, "protocol error: data for no posted receive");
  const PostedCts& pc = posted_[arrive_seq_ % kFifoSlots];
  const MessageHeader h = header_of(arrive_seq_, arrive_sub_, imm);
  if (const char* why = placement_misfit(pc.cts.p[arrive_sub_], h))
    return fail_with(ncclRemoteError, "protocol error: message (seq " + std::to_string(h.seq) + ", " +
                                          std::to_string(h.wire_bytes) + " bytes) does not fit the receive: " + why);
  if (++arrive_sub_ == pc.cts.n) {
    arrive_sub_ = 0;
    ++arrive_seq_;
  }
  if (const char* why = parts_.first(h, imm, split(h.wire_bytes, uint32_t(qps_.size())).parts))
    return fail_with(ncclRemoteError, std::string("protocol error: ") + why);
  return collect_arrivals();
}

size_t IbLink::placements_open() const {
  size_t n = 0;
  for (uint32_t s = arrive_seq_; s != cts_written_; ++s) n += posted_[s % kFifoSlots].cts.n;
  return n - arrive_sub_;
}

ncclResult_t IbLink::collect_arrivals() {
  MessageHeader h;
  while (parts_.pop(&h)) {
    PostedCts& pc = posted_[h.seq % kFifoSlots];
    pc.arrived |= 1u << h.sub;
    if (pc.arrived == (1u << pc.cts.n) - 1) pc.regs.clear();  // the peer writes no more there
    arrived_.push_back(h);
  }
  return ncclSuccess;
}

ncclResult_t IbLink::poll_arrival(MessageHeader* h, bool* got) {
  *got = false;
  if (err_->code() != ncclSuccess) return err_->code();
  if (arrived_.empty()) return ncclSuccess;
  *h = arrived_.front();
  arrived_.pop_front();
  *got = true;
  return ncclSuccess;
}

// ---- sending end --------------------------------------------------------------------------------

ncclResult_t IbLink::poll_cts(ClearToSend* cts, bool* got) {
  *got = false;
  if (err_->code() != ncclSuccess) return err_->code();
  const CtsSlot& s = inbox_->fifo[cts_taken_ % kFifoSlots];
  const uint32_t want = cts_taken_ + 1;
  if (__atomic_load_n(&s.stamp, __ATOMIC_ACQUIRE) != want) return ncclSuccess;
  const uint32_t n = __atomic_load_n(&s.n, __ATOMIC_RELAXED);
  if (n == 0 || n > kMaxRecvs) return fail_with(ncclRemoteError, "protocol error: a clear-to-send of " + std::to_string(n) + " receives");
  CtsEntry e[kMaxRecvs];
  std::memcpy(e, s.e, n * sizeof(CtsEntry));
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  const auto* end = reinterpret_cast<const uint32_t*>(reinterpret_cast<const char*>(&s) + end_stamp_offset(n));
  if (__atomic_load_n(end, __ATOMIC_RELAXED) != want) return ncclSuccess;  // not all of it has landed
  cts->seq = cts_taken_;
  cts->n = n;
  cts->first = placements_taken_;
  placements_taken_ += n;
  for (uint32_t i = 0; i < n; ++i) {
    Placement& p = cts->p[i];
    p.tag = e[i].tag;
    p.capacity = e[i].capacity;
    p.staging_bytes = e[i].staging_bytes;
    p.target = e[i].target_addr;
    p.staging = e[i].staging_addr;
    p.target_key = e[i].target_rkey;
    p.staging_key = e[i].staging_rkey;
  }
  cts_n_[cts_taken_ % kFifoSlots] = n;
  ++cts_taken_;
  *got = true;
  return ncclSuccess;
}

ncclResult_t IbLink::post_message(const MessageHeader& h, const Placement& to, const void* buf, Xfer* x) {
  if (err_->code() != ncclSuccess) return err_->code();
  if (h.seq != next_seq_ || h.sub != next_sub_ || h.seq == cts_taken_)
    return fail_with(ncclInternalError, "message posted out of turn");
  if (h.wire_bytes > (h.compressed ? to.staging_bytes : to.capacity) || h.wire_bytes > kMaxWireBytes)
    return fail_with(ncclInternalError, "message of " + std::to_string(h.wire_bytes) + " bytes larger than its placement");
  MrRef mr;
  if (h.wire_bytes > 0 && mrs_->acquire(buf, h.wire_bytes, &mr) != ncclSuccess)
    return fail_with(ncclSystemError, "could not register a send buffer");
  if (++next_sub_ == cts_n_[next_seq_ % kFifoSlots]) {
    next_sub_ = 0;
    ++next_seq_;
  }
  const uint32_t imm = (h.compressed ? kImmCompressed : uint32_t(h.why) << kImmRawWhyShift) | uint32_t(h.wire_bytes);
  sends_.push_back(SendOp{static_cast<const char*>(buf), h.wire_bytes, x, send_seq_++, imm,
                          h.compressed ? to.staging : to.target, h.compressed ? to.staging_key : to.target_key,
                          std::move(mr)});
  x->pending.fetch_add(1, std::memory_order_relaxed);
  return progress();
}

ncclResult_t IbLink::issue(SendOp* op) {
  const Split s = split(op->n, uint32_t(qps_.size()));
  for (uint32_t p = 0; p < s.parts; ++p) {
    const size_t begin = p * s.part_len, end = std::min(op->n, begin + s.part_len);
    while (!(op->parts_issued >> p & 1) && sq_used_[p] < kSendDepth) {
      const size_t off = begin + op->done[p], len = std::min(kChunk, end - off);
      const bool last = off + len == end;
      ibv_sge sge{reinterpret_cast<uintptr_t>(op->buf + off), uint32_t(len), len ? op->mr.lkey() : 0};
      ibv_send_wr wr;
      std::memset(&wr, 0, sizeof wr);
      wr.wr_id = wr_id(kWrData, p, op->seq);
      wr.sg_list = len ? &sge : nullptr;
      wr.num_sge = len ? 1 : 0;
      wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      wr.imm_data = htonl(op->imm);
      wr.wr.rdma.remote_addr = op->raddr + off;
      wr.wr.rdma.rkey = op->rkey;
      ZIP_CHECK(post(p, &wr));
      op->done[p] += len;
      op->wrs_out++;
      if (last) op->parts_issued |= 1u << p;
    }
  }
  op->issued = op->parts_issued == (1u << s.parts) - 1;
  return ncclSuccess;
}

// Messages start in posting order; a QP carries one message's work requests before the next one's.
ncclResult_t IbLink::issue_sends() {
  while (issue_seq_ != send_seq_) {
    SendOp& op = sends_[issue_seq_ - sends_.front().seq];
    ZIP_CHECK(issue(&op));
    if (!op.issued) break;
    issue_seq_++;
  }
  return ncclSuccess;
}

void IbLink::complete_sends() {
  while (!sends_.empty() && sends_.front().issued && sends_.front().wrs_out == 0) {
    sends_.front().x->piece_done();
    sends_.pop_front();
  }
}

}  // namespace zipccl::verbs
