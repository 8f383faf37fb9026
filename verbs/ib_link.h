// One verbs link: a completion queue and NCCL_IB_QPS_PER_CONNECTION reliable-connected queue
// pairs, behind the engine's Link interface, with NCCL net_ib's one control message per receive.
//
// The receiver RDMA-writes each clear-to-send (tag, capacity, and the address and key of the
// target buffer and of the staging buffer for compressed bytes, per grouped receive) into a slot
// of the sender's mailbox; nothing else flows back. The sender takes the slots in order, and
// RDMA-writes each message into the placement it matched: split into parts over the QPs (whole
// LL128 lines) and chunks within a part, the last chunk of each part WRITE_WITH_IMM, the immediate
// carrying the message's header (compressed or raw, bytes on the wire). Messages go out in
// (seq, sub) order, so the receiver knows which placement an immediate on QP 0 completes; parts on
// other QPs are matched to messages in the same order. A message has arrived once every part's
// immediate has.
//
// Setup, registration and liveness are in ib_link.cc, the data path in ib_p2p.cc, the GPUDirect
// flush in ib_flush.cc. Everything advances from the engine's calls; no thread of ours touches a
// link except the HCA's event thread, which only sets its sticky error.
#pragma once

#include <infiniband/verbs.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ib_devices.h"
#include "ib_parts.h"
#include "ib_wire.h"
#include "mr_cache.h"
#include "transport.h"

namespace zipccl::verbs {

class IbLink : public Link {
 public:
  // The completion queue, nqps queue pairs (in INIT) and the link's buffers on `port`.
  // traffic_class: this link's (NCCL's per-communicator setting), -1 for NCCL_IB_TC.
  static ncclResult_t create(const IbPort& port, int nqps, int traffic_class, std::unique_ptr<IbLink>* out);
  ~IbLink() override;

  // This end's half of the exchange; magic, version and nonce are the caller's.
  void local_info(QpInfo* info) const;
  // Brings every queue pair to RTS towards the end `remote` describes and posts the receives.
  ncclResult_t connect_qps(const QpInfo& remote, const std::string& peer);
  // Keeps the bootstrap socket: it closing tells that the peer has gone.
  void attach(int fd);

  ncclResult_t post_cts(const ClearToSend& cts) override;
  ncclResult_t poll_arrival(MessageHeader* h, bool* got) override;
  ncclResult_t poll_cts(ClearToSend* cts, bool* got) override;
  ncclResult_t post_message(const MessageHeader& h, const Placement& to, const void* buf, Xfer* x) override;
  ncclResult_t progress() override;
  ncclResult_t reg_mem(void* data, size_t size, std::unique_ptr<MemReg>* out) override;
  ncclResult_t reg_device_mem(void* data, size_t size, int dmabuf_fd, uint64_t offset, bool for_receives,
                              std::unique_ptr<MemReg>* out) override;
  ncclResult_t flush(const void* data, Xfer* x) override;
  ncclResult_t error() const override { return err_->code(); }
  std::string error_text() const override { return err_->text(); }
  bool peer_closed() const override;
  std::string peer() const override { return peer_; }

 private:
  // Sending end: one message, until its work requests have completed.
  struct SendOp {
    const char* buf;
    size_t n;
    Xfer* x;
    uint32_t seq;  // position among this link's messages
    uint32_t imm;
    uint64_t raddr;
    uint32_t rkey;
    MrRef mr;
    uint32_t parts_issued = 0;  // bit p: part p's work requests all posted
    bool issued = false;        // every part's
    uint32_t wrs_out = 0;  // posted, not yet completed
    size_t done[kMaxQpsPerConn] = {};  // bytes of each part posted
  };
  // Receiving end: a posted clear-to-send, the registrations its placements advertise, and which
  // of its messages have arrived.
  struct PostedCts {
    ClearToSend cts;
    std::vector<MrRef> regs;
    bool written = false;  // its RDMA write is posted
    uint32_t arrived = 0;  // bit i: placement i's message has arrived
  };
  // A message whose immediate came on QP 0, waiting for its parts on the other QPs.
  struct FlushOp {
    Xfer* x;
    MrRef mr;  // the device buffer read
  };
  // Sources of our RDMA writes and the flush sink, registered for local access.
  struct Local {
    CtsSlot outbox[kFifoSlots];
    uint64_t flush_sink;
  };

  static constexpr uint32_t kSendDepth = 256;  // send work requests per QP
  // Receives posted per QP: each message's last write on a QP takes one, and at most
  // kMaxRequests x kMaxRecvs messages are in flight.
  static constexpr uint32_t kRecvDepth = kMaxRequests * kMaxRecvs;
  static constexpr uint32_t kFlushDepth = 64;  // flushes in flight (NCCL has at most 32 requests)

  IbLink() = default;
  ncclResult_t fail_with(ncclResult_t code, const std::string& why);
  // Polls cq until it is empty, each completion through on_wc (a failure stops there).
  template <typename F>
  ncclResult_t drain(ibv_cq* cq, F on_wc);
  ncclResult_t on_completion(const ibv_wc& wc);
  ncclResult_t on_immediate(uint32_t qp, uint32_t imm);
  size_t placements_open() const;  // placements posted to the peer and not yet filled
  ncclResult_t collect_arrivals();  // messages with all their parts in, to arrived_
  ncclResult_t post(uint32_t qp, ibv_send_wr* wr);
  ncclResult_t post_receive(uint32_t qp);
  ncclResult_t write_cts();
  ncclResult_t issue(SendOp* op);
  ncclResult_t issue_sends();
  void complete_sends();
  ncclResult_t create_flush_qp();
  ncclResult_t on_flush_completion(const ibv_wc& wc);
  void check_peer();
  void peer_gone(ncclResult_t code, const std::string& why);

  std::shared_ptr<IbHca> hca_;
  std::shared_ptr<MrCache> mrs_;
  int port_ = 0;
  ibv_port_attr attr_{};
  std::string dev_;  // "mlx5_0:1"
  std::string peer_ = "?";
  uint8_t gid_[16] = {};
  int gid_index_ = 0;
  int traffic_class_ = -1;
  uint32_t max_inline_ = 0;  // inline bytes QP 0 takes
  std::shared_ptr<StickyError> err_ = std::make_shared<StickyError>();

  ibv_cq* cq_ = nullptr;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> sq_used_;  // send work requests posted and not completed, per QP
  Mailbox* inbox_ = nullptr;       // written by the peer
  ibv_mr* inbox_mr_ = nullptr;
  Local* local_ = nullptr;
  ibv_mr* local_mr_ = nullptr;
  uint64_t peer_mailbox_ = 0;
  uint32_t peer_mailbox_rkey_ = 0;
  // GPUDirect flush: a QP connected to itself, whose 1-byte RDMA reads of a device buffer
  // complete only after the HCA's earlier writes into it have reached GPU memory (as NCCL's).
  ibv_cq* flush_cq_ = nullptr;
  ibv_qp* flush_qp_ = nullptr;
  std::deque<FlushOp> flushes_;  // posted, in completion order

  int fd_ = -1;
  int64_t next_check_ms_ = 0;
  // When and how the peer went: its bootstrap socket closed, or a queue pair failed under our
  // clear-to-send writes.
  int64_t gone_ms_ = -1;
  bool grace_over_ = false;  // check_peer() found kGoneGraceMs past gone_ms_
  ncclResult_t gone_code_ = ncclSuccess;
  std::string gone_why_;

  // Sending end.
  uint32_t cts_taken_ = 0;          // clear-to-sends read from the inbox
  uint32_t placements_taken_ = 0;   // their placements
  uint32_t cts_n_[kFifoSlots] = {};  // their placement counts, by seq % kFifoSlots
  uint32_t next_seq_ = 0, next_sub_ = 0;  // the placement the next message must fill
  std::deque<SendOp> sends_;        // in posting order, until completed
  uint32_t send_seq_ = 0;
  uint32_t issue_seq_ = 0;          // first send not fully posted

  // Receiving end.
  PostedCts posted_[kFifoSlots];    // by seq % kFifoSlots
  uint32_t cts_posted_ = 0;         // clear-to-sends posted by the engine
  uint32_t cts_written_ = 0;        // of which written to the peer
  uint32_t arrive_seq_ = 0, arrive_sub_ = 0;  // the placement QP 0's next immediate fills
  PartMatcher parts_;
  std::deque<MessageHeader> arrived_;
};

}  // namespace zipccl::verbs
