#include "ib_handshake.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "log.h"
#include "ib_params.h"

namespace zipccl::verbs {
namespace {

// This end's half of the exchange, with the handle's nonce.
QpInfo make_info(const IbLink& conn, uint64_t nonce) {
  QpInfo info;
  std::memset(&info, 0, sizeof info);
  info.magic = kInfoMagic;
  info.version = kWireVersion;
  info.nonce = nonce;
  conn.local_info(&info);
  return info;
}

std::vector<char> bytes_of(const QpInfo& info) {
  const char* b = reinterpret_cast<const char*>(&info);
  return std::vector<char>(b, b + sizeof info);
}

// Why a QpInfo is not from a zipccl peer that holds the handle, or null.
const char* invalid(const QpInfo& i, uint64_t nonce) {
  if (i.magic != kInfoMagic) return "not a zipccl verbs handshake";
  if (i.version != kWireVersion) return "unsupported handshake version";
  if (i.nonce != nonce) return "wrong nonce (not the peer this handle was given to)";
  if (i.nqps < 1 || i.nqps > kMaxQpsPerConn) return "bad queue pair count";
  if (i.traffic_class > 256) return "bad traffic class";
  if (i.mtu < IBV_MTU_256 || i.mtu > IBV_MTU_4096) return "bad path MTU";
  return nullptr;
}

}  // namespace

// ---- listener -----------------------------------------------------------------------------------

IbListener::IbListener(IbPort port, int fd, uint64_t nonce, std::string where)
    : port_(std::move(port)), hellos_(fd, sizeof(QpInfo), std::move(where)), nonce_(nonce) {}

IbListener::~IbListener() {
  for (auto& a : accepting_) close(a.fd);
}

const char* IbListener::admit(int fd, const SockAddr& peer, const QpInfo& hello) {
  if (const char* why = invalid(hello, nonce_)) return why;
  if (!set_conn_options(fd, int(socket_timeout_ms()))) return "socket options failed";
  std::unique_ptr<IbLink> conn;
  if (IbLink::create(port_, hello.nqps, int(hello.traffic_class) - 1, &conn) != ncclSuccess || conn->connect_qps(hello, addr_str(peer)) != ncclSuccess)
    return "could not set up its queue pairs";
  Accepting a{fd, peer, std::move(conn), {}, 0, 0, 0, now_ms() + handshake_timeout_ms()};
  a.reply = make_info(*a.conn, nonce_);
  accepting_.push_back(std::move(a));
  return nullptr;
}

ncclResult_t IbListener::accept(std::unique_ptr<Link>* out) {
  out->reset();
  ZIP_CHECK(hellos_.poll([this](int fd, const SockAddr& peer, const char* bytes) {
    QpInfo h;
    std::memcpy(&h, bytes, sizeof h);
    return admit(fd, peer, h);
  }));
  for (size_t i = 0; i < accepting_.size(); ++i) {
    Accepting& a = accepting_[i];
    Io io = send_some(a.fd, &a.reply, sizeof a.reply, &a.sent);
    if (io == Io::kDone) io = recv_some(a.fd, &a.ready, sizeof a.ready, &a.got);
    if (io == Io::kAgain && now_ms() < a.deadline_ms) continue;
    const char* why = io == Io::kAgain  ? "silent past NCCL_ZIP_HANDSHAKE_TIMEOUT_MS"
                      : io != Io::kDone ? "closed before completing the handshake"
                      : a.ready != kReadyMagic ? "bad ready word" : nullptr;
    if (why) {
      hellos_.reject(a.fd, a.peer, why);
    } else {
      ZIP_INFO(NCCL_NET | NCCL_INIT, "accepted connection from %s on %s", addr_str(a.peer).c_str(),
               hellos_.where().c_str());
      a.conn->attach(a.fd);
      *out = std::move(a.conn);
    }
    accepting_.erase(accepting_.begin() + long(i));
    return ncclSuccess;
  }
  return ncclSuccess;
}

// ---- connector ----------------------------------------------------------------------------------

IbLinkector::IbLinkector(std::unique_ptr<IbLink> conn, const SockAddr& addr, uint64_t nonce)
    : conn_(std::move(conn)),
      addr_(addr),
      nonce_(nonce),
      hello_(addr, bytes_of(make_info(*conn_, nonce)), now_ms() + handshake_timeout_ms()) {}

IbLinkector::~IbLinkector() {
  if (fd_ >= 0) close(fd_);
}

ncclResult_t IbLinkector::progress(std::unique_ptr<Link>* out) {
  out->reset();
  const std::string peer = addr_str(addr_);
  if (fd_ < 0) {
    bool sent = false;
    ZIP_CHECK(hello_.step(&sent));
    if (!sent) return ncclSuccess;
    fd_ = hello_.release();
    if (!set_conn_options(fd_, int(socket_timeout_ms()))) {
      ZIP_WARN("connect to %s: socket options failed: %s", peer.c_str(), std::strerror(errno));
      return ncclSystemError;
    }
    if (socket_timeout_ms() > 0) answer_deadline_ms_ = now_ms() + socket_timeout_ms();
  }
  // The listener answers once NCCL calls its accept, which its peer's NCCL does while it sets up
  // the same communicator: a listener silent for NCCL_ZIP_SOCKET_TIMEOUT_MS is one that never
  // will (one that goes away closes the socket).
  Io io = recv_some(fd_, &reply_, sizeof reply_, &got_);
  if (io == Io::kAgain && !qps_ready_ && answer_deadline_ms_ && now_ms() > answer_deadline_ms_) {
    ZIP_WARN("connect to %s: no answer from the listener after %lld ms (%zu of %zu bytes; "
             "NCCL_ZIP_SOCKET_TIMEOUT_MS)", peer.c_str(), (long long)socket_timeout_ms(), got_, sizeof reply_);
    return ncclRemoteError;
  }
  if (io == Io::kDone && !qps_ready_) {
    if (const char* why = invalid(reply_, nonce_)) {
      ZIP_WARN("connect to %s: bad answer: %s", peer.c_str(), why);
      return ncclRemoteError;
    }
    ZIP_CHECK(conn_->connect_qps(reply_, peer));
    qps_ready_ = true;
  }
  if (io == Io::kDone) io = send_some(fd_, &ready_, sizeof ready_, &sent_);
  if (io == Io::kAgain) return ncclSuccess;
  if (io != Io::kDone) {
    ZIP_WARN("connect to %s: the listener closed the connection during the handshake", peer.c_str());
    return ncclRemoteError;
  }
  ZIP_INFO(NCCL_NET | NCCL_INIT, "connected to %s", peer.c_str());
  conn_->attach(fd_);
  fd_ = -1;
  *out = std::move(conn_);
  return ncclSuccess;
}

}  // namespace zipccl::verbs
