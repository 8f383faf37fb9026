// A helper thread of the socket transport: owns a few data sockets of one connection and moves
// the chunks queued on each, in order, with non-blocking I/O and poll(), so neither NCCL's
// progress thread nor a busy socket holds up the others.
#pragma once

#include <atomic>

#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "pacer.h"
#include "status.h"
#include "transport.h"

namespace zipccl::tcp {

class SocketWorker {
 public:
  // pacer: the connection's send-rate cap, shared by its workers, or null. received: counts the
  // bytes received, for the connection's stall check, or null.
  SocketWorker(std::vector<int> fds, StickyError* err, const std::string& peer, Pacer* pacer,
               std::atomic<uint64_t>* received = nullptr);
  ~SocketWorker();  // stops and joins; the fds stay open (the connection owns them)
  SocketWorker(const SocketWorker&) = delete;
  SocketWorker& operator=(const SocketWorker&) = delete;

  // Queue one chunk on local socket `sock`; the caller has already counted it in x->pending.
  void push(int sock, bool send, char* buf, size_t n, Xfer* x);

 private:
  struct Task {
    char* buf;
    size_t n;
    size_t off;
    bool send;
    Xfer* x;
  };
  struct Sock {
    int fd;
    std::deque<Task> q;  // only the worker pops; references to the front survive push_back
  };
  void run();
  // False on a socket error; *paced_ns > 0 when the pacer holds the send back that long.
  bool step(Sock& s, Task& t, int64_t* paced_ns);

  std::vector<Sock> socks_;
  StickyError* err_;
  std::string peer_;
  Pacer* pacer_;
  std::atomic<uint64_t>* received_;
  std::mutex mu_;
  int wake_fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace zipccl::tcp
