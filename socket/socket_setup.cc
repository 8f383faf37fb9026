#include "socket_setup.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "log.h"
#include "socket_link.h"
#include "socket_params.h"

namespace zipccl::tcp {

constexpr int kMaxSockets = kMaxDataSockets + 1;  // and the control socket

SocketListener::SocketListener(int fd, uint64_t nonce, std::string where, std::shared_ptr<Pacer> pacer)
    : hellos_(fd, sizeof(Hello), std::move(where)), nonce_(nonce), pacer_(std::move(pacer)) {}

SocketListener::~SocketListener() {
  for (auto& g : groups_)
    for (int fd : g.fds)
      if (fd >= 0) close(fd);
}

ncclResult_t SocketListener::accept(std::unique_ptr<Link>* out) {
  out->reset();
  ZIP_CHECK(hellos_.poll([this](int fd, const SockAddr& peer, const char* bytes) {
    Hello h;
    std::memcpy(&h, bytes, sizeof h);
    return admit(fd, peer, h);
  }));
  for (size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    if (g.have != int(g.fds.size())) continue;
    for (int fd : g.fds) {
      if (!set_conn_options(fd, int(socket_timeout_ms()))) {
        ZIP_WARN("accept on %s: socket options failed: %s", hellos_.where().c_str(), std::strerror(errno));
        return ncclSystemError;
      }
    }
    ZIP_INFO(NCCL_NET | NCCL_INIT, "accepted connection from %s on %s (%zu sockets)", g.peer.c_str(),
             hellos_.where().c_str(), g.fds.size());
    *out = std::make_unique<SocketLink>(g.fds, g.peer, pacer_, socket_timeout_ms(), inline_rule(), eager_ahead(),
                                         push_receives());
    groups_.erase(groups_.begin() + long(i));
    return ncclSuccess;
  }
  return ncclSuccess;
}

const char* SocketListener::admit(int fd, const SockAddr& peer, const Hello& h) {
  if (h.magic != kHelloMagic) return "not a zipccl handshake";
  if (h.version != kVersion) return "unsupported handshake version";
  if (h.nonce != nonce_) return "wrong nonce (not the peer this handle was given to)";
  if (h.nsocks < 2 || h.nsocks > kMaxSockets || h.index >= h.nsocks) return "bad socket count";
  Group* g = nullptr;
  for (auto& x : groups_)
    if (x.conn_id == h.conn_id) g = &x;
  if (!g) {
    groups_.push_back(Group{h.conn_id, std::vector<int>(h.nsocks, -1), 0, addr_str(peer)});
    g = &groups_.back();
  }
  if (g->fds.size() != h.nsocks || g->fds[h.index] != -1) return "inconsistent socket group";
  g->fds[h.index] = fd;
  g->have++;
  return nullptr;
}

SocketConnector::SocketConnector(const SockAddr& addr, uint64_t nonce, std::shared_ptr<Pacer> pacer)
    : addr_(addr), pacer_(std::move(pacer)) {
  const int n = 1 + socket_threads() * sockets_per_thread();
  const uint64_t conn_id = random64();
  const int64_t deadline = now_ms() + handshake_timeout_ms();
  for (int i = 0; i < n; ++i) {
    const Hello h{kHelloMagic, kVersion, uint16_t(i), uint16_t(n), 0, 0, nonce, conn_id};
    const char* b = reinterpret_cast<const char*>(&h);
    socks_.push_back(std::make_unique<HelloConnector>(addr, std::vector<char>(b, b + sizeof h), deadline));
  }
}

ncclResult_t SocketConnector::progress(std::unique_ptr<Link>* out) {
  out->reset();
  bool all = true;
  for (auto& s : socks_) {
    bool done = false;
    ZIP_CHECK(s->step(&done));
    all &= done;
  }
  if (!all) return ncclSuccess;
  std::vector<int> fds;
  for (auto& s : socks_) fds.push_back(s->release());
  socks_.clear();
  for (int fd : fds) {
    if (!set_conn_options(fd, int(socket_timeout_ms()))) {
      ZIP_WARN("connect to %s: socket options failed: %s", addr_str(addr_).c_str(), std::strerror(errno));
      for (int f : fds) close(f);
      return ncclSystemError;
    }
  }
  ZIP_INFO(NCCL_NET | NCCL_INIT, "connected to %s (%zu sockets, %d helper threads)", addr_str(addr_).c_str(),
           fds.size(), std::min<int>(socket_threads(), int(fds.size()) - 1));
  *out = std::make_unique<SocketLink>(std::move(fds), addr_str(addr_), pacer_, socket_timeout_ms(), inline_rule(),
                                      eager_ahead());
  return ncclSuccess;
}

}  // namespace zipccl::tcp
