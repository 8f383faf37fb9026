// One RC endpoint on the emulated libibverbs, driven through verbs/ibv_loader exactly as the
// transport drives libibverbs: the loader's function table for the exported verbs, verbs.h's
// inline calls (ibv_post_send, ibv_poll_cq, ...) on the objects it returns. Shared by the
// emulation tests and their peer process, so no GoogleTest here: failures come back as errors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ibv_loader.h"

namespace zipccl::verbs::emu_test {

// libzipccl-ibverbs-emu.so, loaded once per process; aborts with the loader's error otherwise.
const IbvFunctions& ibv();

// One send WR of n SGEs on qp (flags: IBV_SEND_*; READ: the SGEs are the landing range), and one
// receive WR of n SGEs; 0 or the post call's errno.
int post_sges(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, ibv_sge* sges, int n,
              unsigned flags = IBV_SEND_SIGNALED, uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t imm = 0);
int post_recv_sges(ibv_qp* qp, uint64_t wr_id, ibv_sge* sges, int n);

// What two endpoints exchange out of band to connect, and to address each other's buffer.
struct Address {
  uint32_t qpn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t psn = 0;
};
std::string format_address(const Address& a);
bool parse_address(const std::string& text, Address* a);

struct EndpointOptions {
  const char* device = nullptr;  // null: the first one
  uint8_t port = 1;
  size_t buffer_bytes = 1 << 20;
  int mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  int qp_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  int cqe = 4096;
  uint32_t max_send_wr = 256, max_recv_wr = 256, max_sge = 4, max_inline = 64;
  bool sig_all = false;
  // Short transport timeouts so that failures show within milliseconds.
  uint8_t timeout = 8, retry_cnt = 3, rnr_retry = 3, min_rnr_timer = 1;
  bool use_grh = false;  // address the peer by GID (RoCE always does)
  uint8_t gid_index = 0;
  int64_t psn = -1;  // the send PSN (what address() advertises); -1: from the QP number
};

class Endpoint {
 public:
  // Opens the device, makes a PD, one CQ for sends and receives, a buffer with its MR, and an RC
  // QP taken to INIT. Null with *error set when any step fails.
  static std::unique_ptr<Endpoint> create(const EndpointOptions& options, std::string* error);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  Address address() const;
  // INIT -> RTR -> RTS towards remote; 0 or the errno of the failing modify_qp.
  int connect(const Address& remote);

  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  ibv_cq* cq() const { return cq_; }
  ibv_qp* qp() const { return qp_; }
  ibv_mr* mr() const { return mr_; }
  const ibv_port_attr& port() const { return port_; }
  char* buffer() { return buf_.data(); }
  uint64_t addr(size_t offset = 0) const {
    return reinterpret_cast<uintptr_t>(buf_.data()) + offset;
  }

  // One WR over buffer()[offset, offset + len) (READ: the landing range); 0 or post_send's errno.
  int post(ibv_wr_opcode op, uint64_t wr_id, size_t offset, size_t len, bool signaled,
           uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t imm = 0);
  int post_recv(uint64_t wr_id, size_t offset, size_t len);
  // Completions until n have come or timeout has passed (then fewer).
  std::vector<ibv_wc> poll(size_t n, std::chrono::milliseconds timeout);

 private:
  Endpoint() = default;
  EndpointOptions opt_;
  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::vector<char> buf_;
  ibv_port_attr port_{};
  ibv_gid gid_{};
};

uint64_t fnv1a(const void* data, size_t len);

}  // namespace zipccl::verbs::emu_test
