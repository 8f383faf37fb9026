// Connection setup of the verbs transport over a TCP bootstrap socket, non-blocking on both
// sides (NCCL polls connect and accept):
//   connector -> listener  its QpInfo with the handle's nonce (the hello; strangers are rejected)
//   listener -> connector  its QpInfo, once its queue pairs are at RTS with receives posted
//   connector -> listener  kReadyMagic, once its own are
// The socket then stays open: its closing tells either end that the other has gone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ib_link.h"
#include "ib_devices.h"
#include "ib_wire.h"
#include "tcp_bootstrap.h"
#include "transport.h"

namespace zipccl::verbs {

class IbListener : public Listener {
 public:
  IbListener(IbPort port, int fd, uint64_t nonce, std::string where);
  ~IbListener() override;
  ncclResult_t accept(std::unique_ptr<Link>* out) override;

 private:
  struct Accepting {
    int fd;
    SockAddr peer;
    std::unique_ptr<IbLink> conn;
    QpInfo reply;
    size_t sent;
    uint32_t ready;
    size_t got;
    int64_t deadline_ms;  // a connector that stalls after its hello is dropped then
  };
  const char* admit(int fd, const SockAddr& peer, const QpInfo& hello);

  IbPort port_;
  HelloListener hellos_;
  uint64_t nonce_;
  std::vector<Accepting> accepting_;
};

class IbLinkector : public Connector {
 public:
  // conn: this end's queue pairs, not yet connected.
  IbLinkector(std::unique_ptr<IbLink> conn, const SockAddr& addr, uint64_t nonce);
  ~IbLinkector() override;
  ncclResult_t progress(std::unique_ptr<Link>* out) override;

 private:
  std::unique_ptr<IbLink> conn_;
  SockAddr addr_;
  uint64_t nonce_;
  HelloConnector hello_;
  int fd_ = -1;
  QpInfo reply_{};
  size_t got_ = 0;
  bool qps_ready_ = false;
  int64_t answer_deadline_ms_ = 0;  // the listener must have answered by then (0: no deadline)
  uint32_t ready_ = kReadyMagic;
  size_t sent_ = 0;
};

}  // namespace zipccl::verbs
