// The emulation's objects and the one registry that owns them. Every verb and the service
// thread work under Emu::mu, so objects are only touched by one thread at a time and a destroyed
// object is gone from every map before anyone can look it up again. The registry maps the
// ibv_* pointers handed out to their owners, which also validates handles.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config.h"
#include "wire.h"

namespace zipccl::verbs::emu {

using Clock = std::chrono::steady_clock;

// Device limits (query_device reports them, creation and posting enforce them).
constexpr int kMaxQp = 65536;
constexpr int kMaxQpWr = 32768;
constexpr int kMaxSge = 30;
constexpr uint32_t kMaxInline = 512;
constexpr int kMaxCqe = 4194303;
constexpr int kMaxRdAtomic = 16;
constexpr uint64_t kMaxMsg = 1ull << 31;
constexpr int kGidTableLen = 4;

struct Port {
  uint16_t lid = 0;      // routing id (an IB port reports it; a RoCE port reports 0)
  int listen_fd = -1;
};

struct Device {
  ibv_device verbs{};
  DeviceSpec spec;
  int index = 0;           // position in the list that created it: node GUID, uverbs name
  int refs = 0;            // device lists and open contexts holding it
  std::vector<Port*> ports;  // [port - 1]; owned by Emu::ports
};

struct Context {
  ibv_context verbs{};
  Device* device = nullptr;
  int async_signal_fd = -1;  // write end; verbs.async_fd is the read end
  std::deque<ibv_async_event> events;
  int async_readers = 0;
  bool closing = false;
  bool lost = false;         // IBV_EVENT_DEVICE_FATAL raised: verbs fail with EIO from now on
  FaultPlan faults;
  GdrSupport gdr;
  uint64_t posted = 0;       // send WRs posted on this context (the fault counter)
  uint64_t rdma_posted = 0;  // of which RDMA writes/reads
};

struct Pd {
  ibv_pd verbs{};
  Context* ctx = nullptr;
  int refs = 0;  // MRs and QPs using it
};

struct Mr {
  ibv_mr verbs{};
  Pd* pd = nullptr;
  uint64_t iova = 0;  // address the keys cover: [iova, iova + length)
  char* host = nullptr;  // where iova lands in this process
  size_t length = 0;
  int access = 0;
  int device = -1;  // CUDA device whose memory host is (GPUDirect RDMA), -1 for host memory
};

struct Channel;

struct Cqe {
  ibv_wc wc{};
  uint32_t epoch = 0;  // the QP's epoch: polling releases a queue slot only in the same one
  bool send = false;
  uint64_t index = 0;  // send: the WR's position in its SQ, releases its slot when polled
};

struct Cq {
  ibv_cq verbs{};
  Context* ctx = nullptr;
  Channel* channel = nullptr;
  std::deque<Cqe> entries;
  bool armed = false;
  bool overflowed = false;
  int refs = 0;  // QPs using it
};

struct Channel {
  ibv_comp_channel verbs{};
  int signal_fd = -1;  // write end; verbs.fd is the read end
  std::deque<Cq*> events;
  int refs = 0;  // CQs using it
};

struct SendWr {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = false;
  uint32_t imm = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  std::vector<ibv_sge> sges;
  bool is_inline = false;
  std::vector<char> inline_data;
  uint64_t length = 0;
  uint64_t index = 0;
  Clock::time_point eligible{};
  bool fault_rkey = false, fault_lost = false, fault_qp_error = false, fault_device_lost = false;
  // Requester progress.
  bool sent = false;
  uint32_t psn = 0;
  Clock::time_point sent_at{};
  bool lost = false;  // known not to have been applied: retransmit after the ack timeout
  Clock::time_point lost_at{};
  ibv_wc_status local_error = IBV_WC_SUCCESS;  // found before it went out
};

struct RecvWr {
  uint64_t wr_id = 0;
  std::vector<ibv_sge> sges;
};

struct Qp {
  ibv_qp verbs{};
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  ibv_qp_cap cap{};
  bool sig_all = false;
  ibv_qp_attr attr{};  // what modify_qp set (query_qp reports it)
  // Remote end, resolved at RTR.
  uint16_t remote_lid = 0;   // 0: unroutable (traffic is lost)
  uint64_t remote_node = 0;  // 0: not known
  // Send queue: posted and not completed; next_tx is the first not yet sent.
  std::deque<SendWr> sq;
  size_t next_tx = 0;
  uint64_t sq_posted = 0, sq_released = 0;
  uint32_t next_psn = 0;
  uint32_t generation = 0;
  int retries_left = 0, rnr_retries_left = 0;
  Clock::time_point resume_at{};  // RNR back-off
  // Receive queue.
  std::deque<RecvWr> rq;
  uint64_t rq_posted = 0, rq_released = 0;
  uint32_t expected_psn = 0;  // responder
  uint32_t epoch = 0;         // bumped at every move to RESET, which empties the queues
  Clock::time_point last_eligible{};  // delay_us: keeps the QP's WRs in order
  // Send WRs posted, by opcode: what NCCL_ZIP_EMU_STATS reports when the QP goes.
  uint64_t sends = 0, writes = 0, writes_imm = 0, reads = 0;
};

struct Emu {
  std::mutex mu;
  std::condition_variable cv;  // close_device waits for async readers to leave
  std::mt19937_64 rng{std::random_device{}()};

  std::map<std::pair<std::string, int>, std::unique_ptr<Port>> ports;  // (device, port)
  std::unordered_map<ibv_device*, std::unique_ptr<Device>> devices;
  std::unordered_map<ibv_context*, std::unique_ptr<Context>> contexts;
  std::unordered_map<ibv_pd*, std::unique_ptr<Pd>> pds;
  std::unordered_map<ibv_mr*, std::unique_ptr<Mr>> mrs;
  std::unordered_map<uint32_t, Mr*> lkeys, rkeys;
  std::unordered_map<ibv_comp_channel*, std::unique_ptr<Channel>> channels;
  std::unordered_map<ibv_cq*, std::unique_ptr<Cq>> cqs;
  std::unordered_map<ibv_qp*, std::unique_ptr<Qp>> qps;
  std::unordered_map<uint32_t, Qp*> qpns;
  uint32_t next_qpn = 0;
  uint32_t next_handle = 1;
  // Send WRs posted on every context: device_lost counts these, so that a device opened again
  // after its loss (a reset that came back) does not die again.
  uint64_t posted = 0;

  // Fabric (fabric.cc).
  int wake_fd = -1;
  bool stopping = false;
  std::thread service;
  std::map<uint16_t, std::unique_ptr<Conn>> out_conns;  // requests we send, by destination LID
  std::vector<std::unique_ptr<Conn>> in_conns;          // requests we serve
};

// The process's registry, created on first use; the service thread starts with it.
Emu& emu();

// Lookups of handed-out pointers; null for unknown ones. Call with mu held.
Context* find(Emu& e, ibv_context* p);
Pd* find(Emu& e, ibv_pd* p);
Cq* find(Emu& e, ibv_cq* p);
Qp* find(Emu& e, ibv_qp* p);

// A random 32-bit key not used as an lkey or rkey yet.
uint32_t new_key(Emu& e);

// Queues an async event on ctx and makes its async_fd readable.
void raise_event(Context* ctx, ibv_async_event event);
// Appends a completion (overflow: IBV_EVENT_CQ_ERR once, the entry is lost) and signals the
// completion channel when armed.
void push_cqe(Cq* cq, const Cqe& cqe);
// Moves qp to ERR; the service thread flushes its queues.
void to_error(Qp* qp);
// IBV_EVENT_DEVICE_FATAL; every QP of ctx to ERR.
void lose_device(Emu& e, Context* ctx);

// Removes an object from the registry and its users' counts; for QPs and CQs also the events
// still queued about them. The destroy verbs and close_device use them.
void drop_qp(Emu& e, Qp* qp);
void drop_mr(Emu& e, Mr* mr);
void drop_cq(Emu& e, Cq* cq);
void drop_pd(Emu& e, Pd* pd);
void drop_channel(Emu& e, Channel* ch);

// Wakes the service thread (new work for it).
void wake(Emu& e);

// A completion with the common fields filled.
Cqe make_cqe(const Qp* qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode);

}  // namespace zipccl::verbs::emu
