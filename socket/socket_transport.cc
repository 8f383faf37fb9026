#include "socket_transport.h"

#include <limits.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "log.h"
#include "socket_params.h"
#include "sockets.h"
#include "socket_worker.h"
#include "tcp_bootstrap.h"

namespace zipccl::tcp {
namespace {

constexpr uint32_t kHandleMagic = 0x5A495053u;  // "SPIZ"
constexpr uint32_t kHelloMagic = 0x5A49484Cu;
constexpr uint16_t kVersion = 1;
constexpr int kMaxDevs = 16;
constexpr int kMaxSockets = 64 + 1;   // data sockets + control
constexpr size_t kMaxCtrlRecord = 4096;
constexpr size_t kMinChunk = 64 << 10;  // smaller pieces cost more in syscalls than they gain
constexpr size_t kLine = 128;

static_assert(sizeof(TcpHandle) <= kTransportHandleBytes, "handle fits");

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t index;   // 0: control socket, 1..n-1: data sockets
  uint16_t nsocks;  // sockets in this connection, control included
  uint16_t reserved;
  uint32_t reserved2;
  uint64_t nonce;
  uint64_t conn_id;  // groups the sockets of one connect()
};
static_assert(sizeof(Hello) == 32, "hello is 32 bytes");

// ---------------------------------------------------------------------------------------------

class SocketConn : public Conn {
 public:
  SocketConn(std::vector<int> fds, std::string peer) : peer_(std::move(peer)) {
    ctrl_fd_ = fds[0];
    data_fds_.assign(fds.begin() + 1, fds.end());
    const int nthreads = std::min<int>(socket_threads(), int(data_fds_.size()));
    std::vector<std::vector<int>> per(nthreads);
    for (size_t i = 0; i < data_fds_.size(); ++i) per[i % nthreads].push_back(data_fds_[i]);
    for (int t = 0; t < nthreads; ++t)
      workers_.push_back(std::make_unique<SocketWorker>(per[t], &err_, peer_));
  }
  ~SocketConn() override {
    workers_.clear();  // joins the helper threads before their sockets go away
    close(ctrl_fd_);
    for (int fd : data_fds_) close(fd);
  }

  ncclResult_t send_ctrl(const void* rec, size_t len) override {
    const uint32_t l = uint32_t(len);
    const char* p = static_cast<const char*>(rec);
    out_.insert(out_.end(), reinterpret_cast<const char*>(&l), reinterpret_cast<const char*>(&l) + 4);
    out_.insert(out_.end(), p, p + len);
    return progress();
  }

  bool has_record() const {
    uint32_t l = 0;
    if (in_.size() >= 4) std::memcpy(&l, in_.data(), 4);
    return in_.size() >= 4 && in_.size() >= 4 + size_t(l);
  }

  ncclResult_t recv_ctrl(void* buf, size_t cap, size_t* len) override {
    *len = 0;
    ZIP_CHECK(progress());
    if (!has_record()) receive();
    if (in_.size() < 4) return ncclSuccess;
    uint32_t l;
    std::memcpy(&l, in_.data(), 4);
    if (l > kMaxCtrlRecord || l > cap) {
      err_.set(ncclRemoteError, "control record of " + std::to_string(l) + " bytes from " + peer_);
      return ncclRemoteError;
    }
    if (in_.size() < 4 + size_t(l)) return ncclSuccess;
    std::memcpy(buf, in_.data() + 4, l);
    in_.erase(in_.begin(), in_.begin() + 4 + l);
    *len = l;
    return ncclSuccess;
  }

  ncclResult_t progress() override {
    if (err_.code() != ncclSuccess) return err_.code();
    while (out_off_ < out_.size()) {
      ssize_t r = ::send(ctrl_fd_, out_.data() + out_off_, out_.size() - out_off_, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) {
        out_off_ += size_t(r);
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      err_.set(ncclRemoteError, "control send to " + peer_ + ": " + std::strerror(errno));
      return ncclRemoteError;
    }
    if (out_off_ == out_.size()) {
      out_.clear();
      out_off_ = 0;
    }
    return ncclSuccess;
  }

  ncclResult_t post_send(const void* buf, size_t n, Xfer* x) override {
    return post(const_cast<char*>(static_cast<const char*>(buf)), n, x, true, &next_send_);
  }
  ncclResult_t post_recv(void* buf, size_t n, Xfer* x) override {
    return post(static_cast<char*>(buf), n, x, false, &next_recv_);
  }
  ncclResult_t error() const override { return err_.code(); }
  std::string error_text() const override { return err_.text(); }
  size_t ctrl_backlog() const override { return out_.size() - out_off_; }
  bool peer_closed() const override { return peer_closed_ && !has_record(); }
  std::string peer() const override { return peer_; }

 private:
  // Reads what the control socket has. Only when a record is wanted: the progress thread calls
  // test() in a tight loop, and a syscall per call would add up over many connections.
  void receive() {
    char tmp[16384];
    while (!peer_closed_) {
      ssize_t r = ::recv(ctrl_fd_, tmp, sizeof tmp, MSG_DONTWAIT);
      if (r > 0) {
        in_.insert(in_.end(), tmp, tmp + r);
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      // The peer closed (or reset) its end. Not an error by itself: data already on the data
      // sockets still arrives; the engine fails whatever still waits on this peer.
      peer_closed_ = true;
    }
  }

  // Both ends split a message the same way (it depends only on n and on how many messages came
  // before), so chunk i of the sender meets chunk i of the receiver on the same socket. Chunks
  // are whole 128-byte lines: an LL128 line (flag last) never straddles two sockets, so its
  // bytes land in order like any single socket's.
  ncclResult_t post(char* buf, size_t n, Xfer* x, bool send, size_t* next) {
    if (err_.code() != ncclSuccess) return err_.code();
    if (n == 0) return ncclSuccess;
    const size_t nsocks = data_fds_.size();
    size_t chunks = std::min(nsocks, (n + kMinChunk - 1) / kMinChunk);
    const size_t chunk = ((n + chunks - 1) / chunks + kLine - 1) / kLine * kLine;
    chunks = (n + chunk - 1) / chunk;
    x->pending.fetch_add(int(chunks), std::memory_order_relaxed);
    const size_t nthreads = workers_.size();
    for (size_t i = 0; i < chunks; ++i) {
      const size_t s = (*next + i) % nsocks;
      const size_t off = i * chunk;
      workers_[s % nthreads]->push(int(s / nthreads), send, buf + off, std::min(chunk, n - off), x);
    }
    *next = (*next + chunks) % nsocks;
    return ncclSuccess;
  }

  std::string peer_;
  int ctrl_fd_;
  std::vector<int> data_fds_;
  StickyError err_;
  std::vector<std::unique_ptr<SocketWorker>> workers_;
  std::vector<char> out_, in_;
  size_t out_off_ = 0;
  bool peer_closed_ = false;
  size_t next_send_ = 0, next_recv_ = 0;
};

// ---------------------------------------------------------------------------------------------

class SocketListener : public Listener {
 public:
  SocketListener(int fd, uint64_t nonce, std::string where)
      : hellos_(fd, sizeof(Hello), std::move(where)), nonce_(nonce) {}
  ~SocketListener() override {
    for (auto& g : groups_)
      for (int fd : g.fds)
        if (fd >= 0) close(fd);
  }

  ncclResult_t accept(std::unique_ptr<Conn>* out) override {
    out->reset();
    hellos_.poll([this](int fd, const SockAddr& peer, const char* bytes) {
      Hello h;
      std::memcpy(&h, bytes, sizeof h);
      return admit(fd, peer, h);
    });
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
      *out = std::make_unique<SocketConn>(g.fds, g.peer);
      groups_.erase(groups_.begin() + long(i));
      return ncclSuccess;
    }
    return ncclSuccess;
  }

 private:
  struct Group {
    uint64_t conn_id;
    std::vector<int> fds;
    int have;
    std::string peer;
  };

  // Returns why the hello is refused, or null after adding the socket to its connection.
  const char* admit(int fd, const SockAddr& peer, const Hello& h) {
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

  HelloListener hellos_;
  uint64_t nonce_;
  std::vector<Group> groups_;
};

// ---------------------------------------------------------------------------------------------

class SocketConnector : public Connector {
 public:
  SocketConnector(const SockAddr& addr, uint64_t nonce) : addr_(addr) {
    const int n = 1 + socket_threads() * sockets_per_thread();
    const uint64_t conn_id = random64();
    const int64_t deadline = now_ms() + handshake_timeout_ms();
    for (int i = 0; i < n; ++i) {
      const Hello h{kHelloMagic, kVersion, uint16_t(i), uint16_t(n), 0, 0, nonce, conn_id};
      const char* b = reinterpret_cast<const char*>(&h);
      socks_.push_back(std::make_unique<HelloConnector>(addr, std::vector<char>(b, b + sizeof h), deadline));
    }
  }

  ncclResult_t progress(std::unique_ptr<Conn>* out) override {
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
    ZIP_INFO(NCCL_NET | NCCL_INIT, "connected to %s (%zu sockets, %d helper threads)",
             addr_str(addr_).c_str(), fds.size(), std::min<int>(socket_threads(), int(fds.size()) - 1));
    *out = std::make_unique<SocketConn>(std::move(fds), addr_str(addr_));
    return ncclSuccess;
  }

 private:
  SockAddr addr_;
  std::vector<std::unique_ptr<HelloConnector>> socks_;
};

// ---------------------------------------------------------------------------------------------

int read_speed_mbps(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  int v = 0;
  if (f >> v && v > 0) return v;
  return 10000;  // what NCCL assumes when the kernel does not say
}

std::string read_pci_path(const std::string& ifname) {
  char buf[PATH_MAX];
  const std::string link = "/sys/class/net/" + ifname + "/device";
  if (!realpath(link.c_str(), buf)) return "";
  return buf;
}

class SocketTransport : public Transport {
 public:
  SocketTransport() {
    ifaces_ = find_interfaces(socket_ifname(), socket_family(), kMaxDevs);
    for (const auto& i : ifaces_) {
      DeviceInfo d;
      d.name = i.name;
      d.pci_path = read_pci_path(i.name);
      d.speed_mbps = read_speed_mbps(i.name);
      d.guid = devs_.size();
      devs_.push_back(d);
    }
  }
  const char* name() const override { return "socket"; }
  std::string settings() const override {
    return std::to_string(socket_threads()) + " socket threads x " +
           std::to_string(sockets_per_thread()) + " sockets";
  }
  int num_devices() const override { return int(devs_.size()); }
  const DeviceInfo& device(int dev) const override { return devs_[dev]; }

  ncclResult_t listen(int dev, void* handle, std::unique_ptr<Listener>* out) override {
    SockAddr a;
    uint64_t nonce;
    const int fd = listen_for_handle(ifaces_[dev].addr, ifaces_[dev].name, kHandleMagic, kVersion, handle, &a, &nonce);
    if (fd < 0) return ncclSystemError;
    const std::string where = ifaces_[dev].name + " " + addr_str(a);
    ZIP_INFO(NCCL_NET, "listening on %s", where.c_str());
    *out = std::make_unique<SocketListener>(fd, nonce, where);
    return ncclSuccess;
  }

  // TCP routes by the handle's address; the local device does not choose anything here.
  // The traffic class is an RDMA setting; NCCL's socket transport ignores it too.
  ncclResult_t connect(int, const void* handle, int, std::unique_ptr<Connector>* out) override {
    SockAddr a;
    uint64_t nonce;
    ZIP_CHECK(parse_handle(handle, kHandleMagic, kVersion, "socket", &a, &nonce));
    *out = std::make_unique<SocketConnector>(a, nonce);
    return ncclSuccess;
  }

 private:
  std::vector<Iface> ifaces_;
  std::vector<DeviceInfo> devs_;
};

}  // namespace

std::unique_ptr<Transport> make_socket_transport() { return std::make_unique<SocketTransport>(); }

}  // namespace zipccl::tcp
