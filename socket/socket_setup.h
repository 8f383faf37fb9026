// Setting up a socket link without blocking, on both ends: the connector opens the control socket
// and NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD data sockets, each opening with a Hello that
// carries the listener's random nonce and the connection's id; the listener groups authenticated
// sockets by that id and hands out a link once all of one connection's have come. Strangers on
// the listen port are rejected and logged.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pacer.h"
#include "socket_wire.h"
#include "tcp_bootstrap.h"
#include "transport.h"

namespace zipccl::tcp {

class SocketListener : public Listener {
 public:
  // Takes the listening socket. where: how log lines name it.
  SocketListener(int fd, uint64_t nonce, std::string where, std::shared_ptr<Pacer> pacer);
  ~SocketListener() override;
  ncclResult_t accept(std::unique_ptr<Link>* out) override;

 private:
  struct Group {
    uint64_t conn_id;
    std::vector<int> fds;
    int have;
    std::string peer;
  };
  // Why the hello is refused, or null after adding the socket to its connection.
  const char* admit(int fd, const SockAddr& peer, const Hello& h);

  HelloListener hellos_;
  uint64_t nonce_;
  std::shared_ptr<Pacer> pacer_;  // the device's send cap, or null
  std::vector<Group> groups_;
};

class SocketConnector : public Connector {
 public:
  SocketConnector(const SockAddr& addr, uint64_t nonce, std::shared_ptr<Pacer> pacer);
  ncclResult_t progress(std::unique_ptr<Link>* out) override;

 private:
  SockAddr addr_;
  std::shared_ptr<Pacer> pacer_;
  std::vector<std::unique_ptr<HelloConnector>> socks_;
};

}  // namespace zipccl::tcp
