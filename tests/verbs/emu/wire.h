// The emulated link: fixed-size headers and payloads over non-blocking unix stream sockets,
// buffered both ways so the single service thread never blocks on a peer (or on itself, for
// loopback QPs, whose requests go through the process's own listening socket).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace zipccl::verbs::emu {

enum class Kind : uint8_t {
  kRequest = 1,  // requester -> responder: one work request
  kAck,          // responder applied it (a READ's ACK carries the data)
  kNak,          // responder refused it: see Nak
  kDropped,      // responder ignored it (no such QP, wrong state/peer, out-of-sequence PSN);
                 // hardware would stay silent and the requester time out: this only starts
                 // that timer sooner than silence would
};

enum class Op : uint8_t { kSend = 1, kSendImm, kWrite, kWriteImm, kRead };

enum class Nak : uint8_t { kNone = 0, kRnr, kRemoteAccess, kInvalidRequest, kRemoteOp };

enum : uint8_t { kFlagForceAccessError = 1 };  // NCCL_ZIP_EMU_FAULT=rkey:N

struct Header {
  uint32_t magic;
  Kind kind;
  Op op;
  Nak nak;
  uint8_t flags;
  uint32_t dst_qpn;     // request: the responder's QP; reply: the requester's
  uint32_t src_qpn;
  uint32_t psn;         // one per message, 24 bits
  uint32_t generation;  // requester's retransmission round; replies echo it
  uint32_t imm;         // as posted (network byte order)
  uint32_t rkey;
  uint16_t dst_lid;     // the port the request was routed to
  uint16_t src_lid;
  uint8_t path_mtu;     // requester's enum ibv_mtu
  uint8_t rnr_timer;    // RNR NAK: the responder's min_rnr_timer
  uint16_t reserved;
  uint64_t dst_node;    // the responder's node id when the requester knows it (GID routing), or 0
  uint64_t src_node;
  uint64_t remote_addr;
  uint64_t length;      // request: message length (READ: bytes wanted)
  uint64_t payload;     // bytes that follow the header
};

constexpr uint32_t kMagic = 0x7a697645;  // "zivE"

// One connected socket with its queued output and partial input.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {}
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  int fd() const { return fd_; }
  bool broken() const { return broken_; }
  bool wants_write() const { return !out_.empty(); }
  size_t queued_bytes() const { return queued_; }

  // Queues header + payload (payload may be null when h.payload is 0); the buffer returned by
  // reserve() lets a caller gather a payload straight into the queued message.
  void queue(const Header& h, const void* payload);
  char* reserve(const Header& h);
  // Withdraws the message the last reserve() queued, when its payload could not be gathered.
  // Nothing of it went out: only flush() writes, and nobody flushes in between.
  void unreserve();

  // Writes what the socket takes now; a failed socket marks the connection broken.
  void flush();
  // Reads what is available and hands every complete message to fn; EOF or a malformed header
  // marks the connection broken.
  void receive(const std::function<void(const Header&, const char*)>& fn);

 private:
  int fd_;
  bool broken_ = false;
  std::deque<std::vector<char>> out_;
  size_t out_offset_ = 0;  // bytes of out_.front() already written
  size_t queued_ = 0;
  std::vector<char> in_;
  size_t in_used_ = 0;
};

}  // namespace zipccl::verbs::emu
