// Small chunks moved by the thread that posts them (NCCL_ZIP_SOCKET_DIRECT): a send to an idle
// socket, and a receive whose bytes are already there, are done when push() returns; a chunk
// behind another on its socket waits its turn, so every socket's bytes stay in order; bigger
// chunks, and what the kernel did not take, go to the helper thread. Every byte checked.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "socket_worker.h"

namespace zipccl::tcp {
namespace {

constexpr size_t kDirect = 64 << 10;

std::vector<char> pattern(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char(seed * 977 + i * 131 + (i >> 8));
  return v;
}

struct Pair {
  Pair() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    tx = std::make_unique<SocketWorker>(std::vector<int>{fds[0]}, &err, "test", nullptr, nullptr, 0, kDirect);
    rx = std::make_unique<SocketWorker>(std::vector<int>{fds[1]}, &err, "test", nullptr, nullptr, 0, kDirect);
  }
  ~Pair() {
    tx.reset();
    rx.reset();
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2];
  StickyError err;
  std::unique_ptr<SocketWorker> tx, rx;
};

void wait(const Xfer& x) {
  while (!x.done()) std::this_thread::yield();
}

TEST(DirectChunks, SmallSendToAnIdleSocketIsDoneOnReturn) {
  Pair p;
  const auto out = pattern(4096, 1);
  Xfer s;
  s.pending = 1;
  p.tx->push(0, true, const_cast<char*>(out.data()), out.size(), &s);
  EXPECT_TRUE(s.done()) << "the posting thread left a 4 KiB send on an idle socket to the helper";
  EXPECT_GT(s.start_ns.load(), 0);
  std::vector<char> in(out.size());
  Xfer r;
  r.pending = 1;
  p.rx->push(0, false, in.data(), in.size(), &r);
  EXPECT_TRUE(r.done()) << "the bytes were there, yet the receive went to the helper";
  EXPECT_EQ(in, out);
  EXPECT_EQ(p.err.code(), ncclSuccess);
}

TEST(DirectChunks, AReceiveWaitingForItsBytesGoesToTheHelper) {
  Pair p;
  std::vector<char> in(8192);
  Xfer r;
  r.pending = 1;
  p.rx->push(0, false, in.data(), in.size(), &r);
  EXPECT_FALSE(r.done());
  const auto out = pattern(in.size(), 2);
  Xfer s;
  s.pending = 1;
  p.tx->push(0, true, const_cast<char*>(out.data()), out.size(), &s);
  wait(s);
  wait(r);
  EXPECT_EQ(in, out);
}

// A small chunk posted behind a big one on the same socket must not overtake it.
TEST(DirectChunks, ASmallChunkWaitsBehindABigOneOnItsSocket) {
  Pair p;
  for (int round = 0; round < 20; ++round) {
    const auto big = pattern(4 << 20, uint32_t(round)), small = pattern(1000, uint32_t(round + 100));
    std::vector<char> in(big.size() + small.size());
    Xfer s1, s2, r;
    s1.pending = s2.pending = 1;
    r.pending = 1;
    p.tx->push(0, true, const_cast<char*>(big.data()), big.size(), &s1);
    p.tx->push(0, true, const_cast<char*>(small.data()), small.size(), &s2);
    p.rx->push(0, false, in.data(), in.size(), &r);
    wait(s1);
    wait(s2);
    wait(r);
    ASSERT_TRUE(std::equal(big.begin(), big.end(), in.begin())) << "round " << round;
    ASSERT_TRUE(std::equal(small.begin(), small.end(), in.begin() + long(big.size()))) << "round " << round;
  }
  EXPECT_EQ(p.err.code(), ncclSuccess);
}

// Sizes around the limit and past the socket buffer, sends and receives posted in either order.
TEST(DirectChunks, EveryByteArrivesWhateverTheSizeAndOrder) {
  Pair p;
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    const size_t n = 1 + (i % 3 == 0 ? rng() % (4 << 20) : rng() % (2 * kDirect));
    const auto out = pattern(n, uint32_t(i));
    std::vector<char> in(n);
    Xfer s, r;
    s.pending = r.pending = 1;
    if (i % 2) {
      p.rx->push(0, false, in.data(), n, &r);
      p.tx->push(0, true, const_cast<char*>(out.data()), n, &s);
    } else {
      p.tx->push(0, true, const_cast<char*>(out.data()), n, &s);
      p.rx->push(0, false, in.data(), n, &r);
    }
    wait(s);
    wait(r);
    ASSERT_EQ(in, out) << "message " << i << " of " << n << " bytes";
  }
  EXPECT_EQ(p.err.code(), ncclSuccess);
}

}  // namespace
}  // namespace zipccl::tcp
