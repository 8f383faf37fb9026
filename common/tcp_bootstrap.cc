#include "tcp_bootstrap.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "log.h"
#include "param.h"

namespace zipccl {
namespace {
constexpr size_t kMaxPending = 256;  // unauthenticated inbound sockets kept at once
}  // namespace

uint64_t random64() {
  uint64_t v = 0;
  ssize_t r;
  do r = getrandom(&v, sizeof v, 0);
  while (r < 0 && errno == EINTR);
  if (r == ssize_t(sizeof v)) return v;
  // No getrandom (old kernel, seccomp): a nonce must still differ between listeners.
  std::random_device rd;
  return uint64_t(rd()) << 32 ^ rd() ^ uint64_t(now_ms()) ^ uint64_t(getpid()) << 40;
}

int listen_socket(SockAddr* a) {
  int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  socklen_t len = addr_len(*a);
  if (bind(fd, &a->sa, len) != 0 || ::listen(fd, SOMAXCONN) != 0 || getsockname(fd, &a->sa, &len) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int listen_for_handle(SockAddr addr, const std::string& name, uint32_t magic, uint16_t version, void* handle,
                      SockAddr* bound, uint64_t* nonce) {
  if (addr.sa.sa_family == AF_INET) addr.sin.sin_port = 0;
  else addr.sin6.sin6_port = 0;
  const int fd = listen_socket(&addr);
  if (fd < 0) {
    ZIP_WARN("listen on %s (%s): %s", name.c_str(), addr_str(addr).c_str(), std::strerror(errno));
    return -1;
  }
  TcpHandle h{};
  h.magic = magic;
  h.version = version;
  std::memcpy(h.addr, &addr, addr_len(addr));
  h.nonce = random64();
  std::memcpy(handle, &h, sizeof h);
  *bound = addr;
  *nonce = h.nonce;
  return fd;
}

ncclResult_t parse_handle(const void* handle, uint32_t magic, uint16_t version, const char* what, SockAddr* addr,
                    uint64_t* nonce) {
  TcpHandle h;
  std::memcpy(&h, handle, sizeof h);
  if (h.magic != magic || h.version != version) {
    ZIP_WARN("connect: the handle is not a zipccl %s handle (magic %08x version %u)", what, h.magic, h.version);
    return ncclInvalidArgument;
  }
  *addr = SockAddr{};
  std::memcpy(addr, h.addr, sizeof h.addr);
  if (addr->sa.sa_family != AF_INET && addr->sa.sa_family != AF_INET6) {
    ZIP_WARN("connect: bad address family %d in handle", addr->sa.sa_family);
    return ncclInvalidArgument;
  }
  *nonce = h.nonce;
  return ncclSuccess;
}

// ---------------------------------------------------------------------------------------------

HelloListener::HelloListener(int fd, size_t hello_bytes, std::string where)
    : fd_(fd), hello_bytes_(hello_bytes), where_(std::move(where)) {}

HelloListener::~HelloListener() {
  close(fd_);
  for (auto& p : pending_) close(p.fd);
}

void HelloListener::reject(int fd, const SockAddr& peer, const char* why) const {
  ZIP_WARN("rejected connection from %s on %s: %s", addr_str(peer).c_str(), where_.c_str(), why);
  close(fd);
}

ncclResult_t HelloListener::take_new_sockets() {
  for (;;) {
    Pending p{};
    socklen_t len = sizeof p.peer;
    p.fd = accept4(fd_, &p.peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (p.fd < 0) {
      // A connection that went away before it was taken, or none waiting: nothing to report.
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
        return ncclSuccess;
      ZIP_WARN("accept on %s: %s%s", where_.c_str(), std::strerror(errno),
               errno == EMFILE || errno == ENFILE ? " (out of file descriptors: raise the limit, ulimit -n)" : "");
      return ncclSystemError;
    }
    if (pending_.size() >= kMaxPending) {
      reject(pending_.front().fd, pending_.front().peer, "too many unauthenticated connections");
      pending_.erase(pending_.begin());
    }
    p.hello.resize(hello_bytes_);
    p.deadline = now_ms() + handshake_timeout_ms();
    pending_.push_back(std::move(p));
  }
}

ncclResult_t HelloListener::poll(const Admit& admit) {
  if (ncclResult_t e = take_new_sockets()) return e;
  const int64_t now = now_ms();
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    ssize_t r = ::recv(p.fd, p.hello.data() + p.got, hello_bytes_ - p.got, MSG_DONTWAIT);
    if (r > 0) p.got += size_t(r);
    const bool again = r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    const char* why = nullptr;
    if (r == 0)
      why = "closed before completing the handshake";
    else if (r < 0 && !again)
      why = std::strerror(errno);
    else if (p.got < hello_bytes_ && now > p.deadline)
      why = "no handshake within NCCL_ZIP_HANDSHAKE_TIMEOUT_MS";
    else if (p.got == hello_bytes_)
      why = admit(p.fd, p.peer, p.hello.data());
    else {
      ++i;
      continue;
    }
    if (why) reject(p.fd, p.peer, why);
    pending_.erase(pending_.begin() + long(i));
  }
  return ncclSuccess;
}

// ---------------------------------------------------------------------------------------------

HelloConnector::HelloConnector(const SockAddr& addr, std::vector<char> hello, int64_t deadline_ms)
    : addr_(addr), hello_(std::move(hello)), deadline_(deadline_ms) {}

HelloConnector::~HelloConnector() {
  if (fd_ >= 0) close(fd_);
}

int HelloConnector::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

ncclResult_t HelloConnector::retry_or_fail(int err) {
  close(fd_);
  fd_ = -1;
  state_ = kStart;
  sent_ = 0;
  // The listener may be momentarily out of backlog; keep trying until the handshake deadline.
  if ((err == ECONNREFUSED || err == ETIMEDOUT || err == EAGAIN) && now_ms() < deadline_) return ncclSuccess;
  ZIP_WARN("connect to %s: %s", addr_str(addr_).c_str(), std::strerror(err));
  return ncclRemoteError;
}

ncclResult_t HelloConnector::step(bool* done) {
  *done = state_ == kDone;
  if (state_ == kStart) {
    fd_ = socket(addr_.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      ZIP_WARN("socket(): %s", std::strerror(errno));
      return ncclSystemError;
    }
    if (::connect(fd_, &addr_.sa, addr_len(addr_)) == 0)
      state_ = kHello;
    else if (errno == EINPROGRESS)
      state_ = kConnecting;
    else
      return retry_or_fail(errno);
  }
  if (state_ == kConnecting) {
    pollfd pfd{fd_, POLLOUT, 0};
    if (::poll(&pfd, 1, 0) <= 0) {
      // A silent (blackholed) listener would otherwise cost the kernel's SYN timeout (~2 min).
      return now_ms() < deadline_ ? ncclSuccess : retry_or_fail(ETIMEDOUT);
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) return retry_or_fail(err);
    state_ = kHello;
  }
  if (state_ == kHello) {
    ssize_t r = ::send(fd_, hello_.data() + sent_, hello_.size() - sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0)
      sent_ += size_t(r);
    else if (!(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
      return retry_or_fail(r < 0 ? errno : ECONNRESET);
    if (sent_ == hello_.size()) state_ = kDone;
  }
  *done = state_ == kDone;
  return ncclSuccess;
}

}  // namespace zipccl
