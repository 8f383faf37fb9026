#include "socket_worker.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace zipccl::tcp {

SocketWorker::SocketWorker(std::vector<int> fds, StickyError* err, const std::string& peer, Pacer* pacer,
                           std::atomic<uint64_t>* received)
    : err_(err), peer_(peer), pacer_(pacer), received_(received) {
  for (int fd : fds) socks_.push_back(Sock{fd, {}});
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {  // without it the thread would only notice work at its poll timeout
    err_->set(ncclSystemError, std::string("socket helper thread for ") + peer_ + ": eventfd: " +
                                   std::strerror(errno) + (errno == EMFILE || errno == ENFILE
                                                               ? " (out of file descriptors: raise the limit, ulimit -n)"
                                                               : ""));
    return;
  }
  thread_ = std::thread([this] { run(); });
}

SocketWorker::~SocketWorker() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  thread_.join();
  close(wake_fd_);
}

void SocketWorker::push(int sock, bool send, char* buf, size_t n, Xfer* x) {
  {
    std::lock_guard<std::mutex> g(mu_);
    socks_[sock].q.push_back(Task{buf, n, 0, send, x});
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

bool SocketWorker::step(Sock& s, Task& t, int64_t* paced_ns) {
  while (t.off < t.n) {
    size_t n = t.n - t.off;
    if (t.send && pacer_ && (n = pacer_->take(n, paced_ns)) == 0) return true;
    ssize_t r = t.send ? ::send(s.fd, t.buf + t.off, n, MSG_DONTWAIT | MSG_NOSIGNAL)
                       : ::recv(s.fd, t.buf + t.off, n, MSG_DONTWAIT);
    if (t.send && pacer_ && size_t(r > 0 ? r : 0) < n) pacer_->give_back(n - size_t(r > 0 ? r : 0));
    if (r > 0) {
      t.off += size_t(r);
      if (!t.send && received_) received_->fetch_add(uint64_t(r), std::memory_order_relaxed);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    std::string why = r == 0 ? "peer closed the connection" : std::strerror(errno);
    err_->set(ncclRemoteError, std::string(t.send ? "send to " : "receive from ") + peer_ + ": " + why);
    return false;
  }
  return true;
}

void SocketWorker::run() {
  pthread_setname_np(pthread_self(), "zip-sock");
  std::vector<pollfd> pfds;
  while (!stop_.load(std::memory_order_relaxed)) {
    bool progressed = false;
    int64_t wait_ns = 1000000000;  // the poll's timeout: a second, or until the pacer allows more
    pfds.clear();
    for (Sock& s : socks_) {
      Task* t = nullptr;
      {
        std::lock_guard<std::mutex> g(mu_);
        if (!s.q.empty()) t = &s.q.front();
      }
      if (!t) continue;
      const size_t before = t->off;
      if (before == 0 && t->send) t->x->piece_started();
      int64_t paced_ns = 0;
      // After an error the connection is dead: keep the tasks queued (never "done") and sleep
      // until the engine closes the connection.
      if (err_->code() == ncclSuccess && step(s, *t, &paced_ns)) {
        progressed |= t->off != before;
        if (t->off == t->n) {
          t->x->piece_done();
          std::lock_guard<std::mutex> g(mu_);
          s.q.pop_front();
          progressed = true;
          continue;
        }
        if (paced_ns > 0)
          wait_ns = std::min(wait_ns, paced_ns);
        else
          pfds.push_back(pollfd{s.fd, short(t->send ? POLLOUT : POLLIN), 0});
      }
    }
    if (progressed) continue;
    pfds.push_back(pollfd{wake_fd_, POLLIN, 0});
    const timespec timeout{time_t(wait_ns / 1000000000), long(wait_ns % 1000000000)};
    ppoll(pfds.data(), pfds.size(), &timeout, nullptr);
    if (pfds.back().revents & POLLIN) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
  }
}

}  // namespace zipccl::tcp
