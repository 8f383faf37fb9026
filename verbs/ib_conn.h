// One verbs connection: a completion queue, NCCL_IB_QPS_PER_CONNECTION reliable-connected queue
// pairs and the buffers behind the engine's Conn interface.
//
// Control records travel as SENDs on QP 0 into receives posted in advance. A SEND lands whole
// and is visible exactly when its completion is polled, whereas a record RDMA-written into a
// ring would need the reader to trust that every byte of it landed before its flag; and the
// data path's writes-with-immediate consume posted receives anyway, so one receive queue serves
// both. Credits bound the records in flight: the receiving end RDMA-writes how many it has
// taken into the sender's mailbox.
//
// Bulk data is receiver-driven: post_recv advertises (address, rkey, length) by an RDMA write
// into the sender's mailbox fifo; the k-th post_send waits for the k-th advertisement and
// RDMA-writes the bytes, split into parts over the QPs and chunks within a part, the last chunk
// of each part WRITE_WITH_IMM carrying the receive's sequence number; the receive completes when
// every part's immediate has arrived. At most kFifoSlots receives are advertised ahead, so the
// fifo is never overwritten before the sender has read it.
//
// Everything advances from the engine's calls (progress, post_*, recv_ctrl); no thread of ours
// touches a connection except the HCA's event thread, which only sets its sticky error.
#pragma once

#include <infiniband/verbs.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ib_devices.h"
#include "ib_wire.h"
#include "mr_cache.h"
#include "transport.h"

namespace zipccl::verbs {

class IbConn : public Conn {
 public:
  // The completion queue, nqps queue pairs (in INIT) and the control buffers on `port`.
  // traffic_class: this connection's (NCCL's per-communicator setting), -1 for NCCL_IB_TC.
  static ncclResult_t create(const IbPort& port, int nqps, int traffic_class, std::unique_ptr<IbConn>* out);
  ~IbConn() override;

  // This end's half of the exchange; magic, version and nonce are the caller's.
  void local_info(QpInfo* info) const;
  // Brings every queue pair to RTS towards the end `remote` describes and posts the receives.
  ncclResult_t connect_qps(const QpInfo& remote, const std::string& peer);
  // Keeps the bootstrap socket: it closing tells that the peer has gone.
  void attach(int fd);

  ncclResult_t send_ctrl(const void* rec, size_t len) override;
  ncclResult_t recv_ctrl(void* buf, size_t cap, size_t* len) override;
  ncclResult_t progress() override;
  ncclResult_t post_send(const void* buf, size_t n, Xfer* x) override;
  ncclResult_t post_recv(void* buf, size_t n, Xfer* x) override;
  ncclResult_t reg_mem(void* data, size_t size, std::unique_ptr<MemReg>* out) override;
  ncclResult_t reg_device_mem(void* data, size_t size, int dmabuf_fd, uint64_t offset, bool for_receives,
                        std::unique_ptr<MemReg>* out) override;
  ncclResult_t flush(const void* data, Xfer* x) override;
  ncclResult_t error() const override { return err_->code(); }
  std::string error_text() const override { return err_->text(); }
  // Records posted but not yet acknowledged count too: a QP destroyed at close drops its
  // unexecuted sends, where a closed socket would still deliver them.
  size_t ctrl_backlog() const override { return ctrl_out_bytes_ + size_t(ctrl_posted_ - ctrl_acked_); }
  bool peer_closed() const override;
  std::string peer() const override { return peer_; }

 private:
  struct SendOp {
    const char* buf;
    size_t n;
    Xfer* x;
    uint32_t seq;
    MrRef mr;
    bool started = false;  // its advertisement has been read
    bool issued = false;   // every work request posted
    uint64_t raddr = 0;
    uint32_t rkey = 0;
    uint32_t wrs_out = 0;  // posted, not yet completed
    size_t done[kMaxQpsPerConn] = {};  // bytes of each part posted
  };
  struct RecvOp {
    char* buf;
    size_t n;
    Xfer* x;
    uint32_t seq;
    MrRef mr;
    uint32_t parts_seen = 0;
  };
  struct FlushOp {
    Xfer* x;
    MrRef mr;  // the device buffer read
  };
  struct Local;  // the outbox and control rings, registered for local access

  IbConn() = default;
  ncclResult_t pump();
  ncclResult_t fail_with(ncclResult_t code, const std::string& why);
  // Polls cq until it is empty, each completion through on_wc (a failure stops there).
  template <typename F>
  ncclResult_t drain(ibv_cq* cq, F on_wc);
  ncclResult_t on_completion(const ibv_wc& wc);
  ncclResult_t post(uint32_t qp, ibv_send_wr* wr);
  ncclResult_t post_receive(uint32_t qp, uint32_t slot);
  ncclResult_t create_flush_qp();
  ncclResult_t on_flush_completion(const ibv_wc& wc);
  // RDMA-writes [src, src + len) of our outbox into the peer's mailbox at offset, on QP 0.
  ncclResult_t write_mailbox(uint64_t id, const void* src, size_t len, size_t offset);
  ncclResult_t flush_ctrl();
  ncclResult_t send_credits();
  ncclResult_t advertise();
  bool take_advert(SendOp* op);
  ncclResult_t issue(SendOp* op);
  ncclResult_t issue_sends();
  void complete();
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
  // GPUDirect flush: a QP connected to itself, whose 1-byte RDMA reads of a device buffer
  // complete only after the HCA's earlier writes into it have reached GPU memory (as NCCL's).
  ibv_cq* flush_cq_ = nullptr;
  ibv_qp* flush_qp_ = nullptr;
  std::deque<FlushOp> flushes_;  // posted, in completion order
  uint64_t peer_mailbox_ = 0;
  uint32_t peer_mailbox_rkey_ = 0;

  int fd_ = -1;
  int64_t next_check_ms_ = 0;
  // When and how the peer went: its bootstrap socket closed, or a queue pair failed under our
  // credit or advertisement writes.
  int64_t gone_ms_ = -1;
  ncclResult_t gone_code_ = ncclSuccess;
  std::string gone_why_;

  std::deque<std::string> ctrl_out_;  // records waiting for a credit
  size_t ctrl_out_bytes_ = 0;
  uint64_t ctrl_posted_ = 0;
  uint64_t ctrl_acked_ = 0;  // control sends completed
  std::deque<std::string> ctrl_in_;
  uint64_t ctrl_taken_ = 0;    // records received from the peer
  uint64_t ctrl_credited_ = 0; // ctrl_taken_ as last written to the peer
  bool credit_write_out_ = false;

  std::deque<SendOp> sends_;  // in posting order, until completed
  uint32_t send_seq_ = 0;
  uint32_t issue_seq_ = 0;    // first send not fully posted
  std::deque<RecvOp> recvs_;  // in posting order, until completed
  uint32_t recv_seq_ = 0;
  uint32_t advertised_ = 0;   // receives advertised so far
  uint32_t recv_done_ = 0;
};

}  // namespace zipccl::verbs
