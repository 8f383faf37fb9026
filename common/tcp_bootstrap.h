// Non-blocking TCP connection setup shared by the transports. The listening side accepts sockets
// and reads one fixed-size hello from each, rejecting (and logging) strangers; the connecting
// side connects, retrying a refused connect until a deadline, and sends its hello. What a hello
// holds and what happens after it is the transport's business.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "clock.h"
#include "sockets.h"
#include "status.h"

namespace zipccl {

uint64_t random64();

// A listening socket on `addr` (port 0: any), non-blocking; *addr gets the bound address. -1 on
// failure, with errno set.
int listen_socket(SockAddr* addr);

// The transport part of NCCL's handle for a transport that bootstraps over TCP: which transport
// (magic, version), the listener's address, and the nonce every connecting socket must present.
struct TcpHandle {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint8_t addr[sizeof(sockaddr_in6)];
  uint64_t nonce;
};

// Listens on addr's host at a free port and fills `handle` with magic, version, the bound address
// and a fresh nonce. Returns the listening socket and sets *bound and *nonce; -1 on failure,
// logged as a failure to listen on `name`.
int listen_for_handle(SockAddr addr, const std::string& name, uint32_t magic, uint16_t version, void* handle,
                      SockAddr* bound, uint64_t* nonce);
// Reads a peer's handle: it must carry `magic` and `version` (what: the transport, for the log)
// and an IPv4 or IPv6 address. Failures are logged.
ncclResult_t parse_handle(const void* handle, uint32_t magic, uint16_t version, const char* what, SockAddr* addr,
                    uint64_t* nonce);

class HelloListener {
 public:
  // Takes the listening socket. where: how log lines name it ("eth0 10.0.0.1:4000").
  HelloListener(int fd, size_t hello_bytes, std::string where);
  ~HelloListener();
  HelloListener(const HelloListener&) = delete;
  HelloListener& operator=(const HelloListener&) = delete;

  // Called with each complete hello: returns null after taking the socket, or why the hello is
  // refused (the socket is then closed and the refusal logged).
  using Admit = std::function<const char*(int fd, const SockAddr& peer, const char* hello)>;
  // Accepts new sockets and reads hellos without blocking. Sockets silent past
  // NCCL_ZIP_HANDSHAKE_TIMEOUT_MS are dropped; at most 256 unauthenticated ones are kept.
  // ncclSystemError (one WARN) when accepting fails for want of resources (file descriptors,
  // memory) or the listening socket is broken; the caller's accept() then fails instead of
  // waiting for a connection it can never take.
  ncclResult_t poll(const Admit& admit);
  const std::string& where() const { return where_; }
  // Logs and closes a socket refused after its hello (a later step of a transport's handshake).
  void reject(int fd, const SockAddr& peer, const char* why) const;

 private:
  struct Pending {
    int fd;
    SockAddr peer;
    std::vector<char> hello;
    size_t got;
    int64_t deadline;
  };
  ncclResult_t take_new_sockets();

  int fd_;
  size_t hello_bytes_;
  std::string where_;
  std::vector<Pending> pending_;
};

// One outbound socket: connect to addr, then send hello.
class HelloConnector {
 public:
  HelloConnector(const SockAddr& addr, std::vector<char> hello, int64_t deadline_ms);
  ~HelloConnector();
  HelloConnector(const HelloConnector&) = delete;
  HelloConnector& operator=(const HelloConnector&) = delete;

  // Advances without blocking; *done once the whole hello is sent. Failures are logged.
  ncclResult_t step(bool* done);
  // The connected socket, from then on the caller's to close.
  int release();

 private:
  enum State { kStart, kConnecting, kHello, kDone };
  ncclResult_t retry_or_fail(int err);

  SockAddr addr_;
  std::vector<char> hello_;
  int64_t deadline_;
  int fd_ = -1;
  State state_ = kStart;
  size_t sent_ = 0;
};

}  // namespace zipccl
