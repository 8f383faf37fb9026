// The service thread: one per process, started with the registry. It accepts connections on the
// ports' LID sockets, reads requests and replies, and runs every QP's requester; all emulated
// traffic and every completion comes from it, asynchronously to the verbs, like a NIC's.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "engine.h"
#include "identity.h"

namespace zipccl::verbs::emu {
namespace {

Emu* g_emu = nullptr;
pid_t g_owner = 0;
std::once_flag g_once;

enum class FdKind { kWake, kListen, kOut, kIn };

struct Polled {
  FdKind kind;
  Conn* conn;
  uint16_t lid;
};

void drain_wake(int fd) {
  uint64_t v;
  while (read(fd, &v, sizeof(v)) == static_cast<ssize_t>(sizeof(v))) {
  }
}

// Sends queued output and drops broken connections. An outgoing one that broke loses what was
// in flight on it.
void flush_and_reap(Emu& e) {
  for (auto it = e.out_conns.begin(); it != e.out_conns.end();) {
    it->second->flush();
    if (it->second->broken()) {
      uint16_t lid = it->first;
      it = e.out_conns.erase(it);
      peer_unreachable(e, lid);
    } else {
      ++it;
    }
  }
  for (auto& c : e.in_conns) c->flush();
  e.in_conns.erase(std::remove_if(e.in_conns.begin(), e.in_conns.end(),
                                  [](const std::unique_ptr<Conn>& c) { return c->broken(); }),
                   e.in_conns.end());
}

void service_loop(Emu& e) {
  std::vector<pollfd> fds;
  std::vector<Polled> what;
  std::unique_lock<std::mutex> lock(e.mu);
  while (!e.stopping) {
    Clock::time_point now = Clock::now();
    Clock::time_point next = now + std::chrono::milliseconds(100);
    for (auto& [ptr, qp] : e.qps) next = std::min(next, progress_requester(e, qp.get(), now));
    flush_and_reap(e);

    fds.clear();
    what.clear();
    fds.push_back({e.wake_fd, POLLIN, 0});
    what.push_back({FdKind::kWake, nullptr, 0});
    for (auto& [key, port] : e.ports) {
      if (port->listen_fd < 0) continue;
      fds.push_back({port->listen_fd, POLLIN, 0});
      what.push_back({FdKind::kListen, nullptr, port->lid});
    }
    for (auto& [lid, c] : e.out_conns) {
      fds.push_back({c->fd(), static_cast<short>(POLLIN | (c->wants_write() ? POLLOUT : 0)), 0});
      what.push_back({FdKind::kOut, c.get(), lid});
    }
    for (auto& c : e.in_conns) {
      fds.push_back({c->fd(), static_cast<short>(POLLIN | (c->wants_write() ? POLLOUT : 0)), 0});
      what.push_back({FdKind::kIn, c.get(), 0});
    }
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(next - Clock::now());
    int timeout_ms = static_cast<int>(std::max<int64_t>(0, (wait.count() + 999) / 1000));

    lock.unlock();
    int n = poll(fds.data(), fds.size(), timeout_ms);
    lock.lock();
    if (n <= 0) continue;
    // Connections are only added or removed by this thread, and not in this loop: the pointers
    // collected above stay valid.
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      switch (what[i].kind) {
        case FdKind::kWake:
          drain_wake(e.wake_fd);
          break;
        case FdKind::kListen:
          for (;;) {
            int fd = accept4(fds[i].fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) break;
            e.in_conns.push_back(std::make_unique<Conn>(fd));
          }
          break;
        case FdKind::kOut:
          what[i].conn->receive([&](const Header& h, const char* p) { handle_reply(e, h, p); });
          break;
        case FdKind::kIn: {
          Conn* c = what[i].conn;
          c->receive([&](const Header& h, const char* p) { handle_request(e, c, h, p); });
          break;
        }
      }
    }
  }
}

void destroy_emu() {
  // A forked child that did not exec has the registry but not the thread: leave both alone.
  if (!g_emu || getpid() != g_owner) return;
  {
    std::lock_guard<std::mutex> lock(g_emu->mu);
    g_emu->stopping = true;
  }
  wake(*g_emu);
  if (g_emu->service.joinable()) g_emu->service.join();
  for (auto& [key, port] : g_emu->ports) {
    if (port->listen_fd >= 0) close(port->listen_fd);
  }
  close(g_emu->wake_fd);
  delete g_emu;
  g_emu = nullptr;
}

// Runs at dlclose and at exit: the service thread must be gone before the code it runs.
__attribute__((destructor)) void unload() { destroy_emu(); }

}  // namespace

Emu& emu() {
  std::call_once(g_once, [] {
    g_emu = new Emu;
    g_owner = getpid();
    g_emu->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    g_emu->next_qpn = static_cast<uint32_t>(g_emu->rng() & 0x3FFFFF) | 0x100;
    Emu* e = g_emu;
    g_emu->service = std::thread([e] { service_loop(*e); });
  });
  return *g_emu;
}

void wake(Emu& e) {
  uint64_t one = 1;
  // Can only fail with EAGAIN, when the counter is already non-zero: the thread wakes anyway.
  [[maybe_unused]] ssize_t n = write(e.wake_fd, &one, sizeof(one));
}

Conn* conn_to(Emu& e, uint16_t lid) {
  auto it = e.out_conns.find(lid);
  if (it != e.out_conns.end()) return it->second.get();
  int fd = connect_lid(lid);
  if (fd < 0) return nullptr;
  return e.out_conns.emplace(lid, std::make_unique<Conn>(fd)).first->second.get();
}

}  // namespace zipccl::verbs::emu
