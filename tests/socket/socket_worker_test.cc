// SocketWorker: a chunk pushed `now` onto a socket with nothing queued moves on the caller's
// thread as far as the socket takes it (a small message then costs no helper wake-up on either
// side), the rest on the helper thread; each socket's chunks still go in the order pushed.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "socket_worker.h"

namespace zipccl::tcp {
namespace {

struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~SocketPair() {
    close(fd[0]);
    close(fd[1]);
  }
};

std::vector<char> pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char((i * 131 + seed * 7 + (i >> 9)) & 0xFF);
  return v;
}

std::vector<char> read_all(int fd, size_t n) {
  std::vector<char> v(n);
  size_t off = 0;
  while (off < n) {
    const ssize_t r = ::recv(fd, v.data() + off, n - off, 0);
    if (r <= 0) break;
    off += size_t(r);
  }
  v.resize(off);
  return v;
}

void write_all(int fd, const std::vector<char>& v) {
  size_t off = 0;
  while (off < v.size()) {
    const ssize_t r = ::send(fd, v.data() + off, v.size() - off, MSG_NOSIGNAL);
    if (r <= 0) return;
    off += size_t(r);
  }
}

bool done_within(const Xfer& x, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (x.pending.load() != 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  return x.pending.load() == 0;
}

// One worker on one socket of a pair; the test plays the peer on the other end. Declared in this
// order, the worker (its thread joined) goes before the sockets close.
class SocketWorkerTest : public testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(err.code(), ncclSuccess); }
  void send(const std::vector<char>& v, Xfer* x, bool now = false) {
    w.push(0, true, const_cast<char*>(v.data()), v.size(), x, now);
  }
  void receive(std::vector<char>* v, Xfer* x, bool now = false) { w.push(0, false, v->data(), v->size(), x, now); }
  int peer() const { return p.fd[1]; }

  SocketPair p;
  StickyError err;
  SocketWorker w{{p.fd[0]}, &err, "test", nullptr};
};

TEST_F(SocketWorkerTest, ASmallChunkPushedNowMovesBeforePushReturns) {
  const std::vector<char> out = pattern(32 << 10, 1);
  Xfer sent;
  sent.pending = 1;
  send(out, &sent, true);
  EXPECT_EQ(sent.pending.load(), 0) << "an empty socket takes 32 KiB at once";
  EXPECT_EQ(read_all(peer(), out.size()), out);

  const std::vector<char> in = pattern(32 << 10, 2);
  write_all(peer(), in);
  std::vector<char> got(in.size());
  Xfer received;
  received.pending = 1;
  receive(&got, &received, true);
  EXPECT_EQ(received.pending.load(), 0) << "bytes already there are taken at once";
  EXPECT_EQ(got, in);
}

// More than the socket takes: the caller moves what fits, the helper the rest, every byte once.
TEST_F(SocketWorkerTest, WhatTheSocketDoesNotTakeAtOnceTheHelperMoves) {
  const std::vector<char> out = pattern(8 << 20, 3);
  Xfer sent;
  sent.pending = 1;
  send(out, &sent, true);
  EXPECT_EQ(sent.pending.load(), 1) << "8 MiB do not fit a socket's buffer";
  EXPECT_EQ(read_all(peer(), out.size()), out);
  EXPECT_TRUE(done_within(sent, 5000));

  std::vector<char> got(8 << 20);
  Xfer received;
  received.pending = 1;
  const std::vector<char> in = pattern(got.size(), 4);
  std::thread writer([&] { write_all(peer(), in); });
  receive(&got, &received, true);
  EXPECT_TRUE(done_within(received, 5000));
  writer.join();
  EXPECT_EQ(got, in);
}

// A chunk pushed `now` behind queued ones waits its turn, sending and receiving.
TEST_F(SocketWorkerTest, AChunkPushedNowGoesAfterThoseQueued) {
  const std::vector<char> big = pattern(8 << 20, 5), small = pattern(16 << 10, 6);
  Xfer sent;
  sent.pending = 2;
  send(big, &sent);
  send(small, &sent, true);
  std::vector<char> want = big;
  want.insert(want.end(), small.begin(), small.end());
  EXPECT_EQ(read_all(peer(), want.size()), want);
  EXPECT_TRUE(done_within(sent, 5000));

  std::vector<char> got_big(big.size()), got_small(small.size());
  Xfer received;
  received.pending = 2;
  std::thread writer([&] { write_all(peer(), want); });
  receive(&got_big, &received);
  receive(&got_small, &received, true);
  EXPECT_TRUE(done_within(received, 5000));
  writer.join();
  EXPECT_EQ(got_big, big);
  EXPECT_EQ(got_small, small);
}

}  // namespace
}  // namespace zipccl::tcp
