// The send-rate cap of NCCL_ZIP_SOCKET_PACE_MBPS: a Pacer never grants more than its rate plus
// its burst, and a worker sending through one moves a large task no faster, every byte intact.
// Bounds are one-sided where a loaded machine can only make things slower.
#include "pacer.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "socket_worker.h"

namespace zipccl::tcp {
namespace {

using Clock = std::chrono::steady_clock;

TEST(Pacer, GrantsNoMoreThanItsRate) {
  constexpr double kRate = 200e6;  // bytes/s; burst 100 KB
  Pacer p(kRate);
  const auto t0 = Clock::now();
  size_t total = 0;
  int waits = 0;
  while (total < 40000000) {
    int64_t wait = 0;
    const size_t n = p.take(1 << 20, &wait);
    if (n == 0) {
      ASSERT_GT(wait, 0);
      ++waits;
      std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
    }
    total += n;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(s, (double(total) - 100e3) / kRate * 0.99) << "faster than the cap";
  EXPECT_LT(s, 10 * double(total) / kRate) << "the pacer held sends back far too long";
  EXPECT_GT(waits, 0);
}

TEST(Pacer, UnusedGrantsReturn) {
  Pacer p(1e-3);  // bytes/s: nothing accrues during the test; burst 64 KiB
  int64_t wait = 0;
  EXPECT_EQ(p.take(1 << 20, &wait), 65536u);
  EXPECT_EQ(p.take(1, &wait), 0u);
  EXPECT_GT(wait, int64_t(900000000000));  // one byte at 1e-3 bytes/s: 1e12 ns
  p.give_back(20000);
  EXPECT_EQ(p.take(1 << 20, &wait), 20000u);
}

// A worker sending 8 MB through a 40 MB/s pacer over a socket pair: at least 0.2 s, bytes exact.
TEST(Pacer, WorkerSendsAtTheCappedRate) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  constexpr size_t kBytes = 8 << 20;
  std::vector<char> out(kBytes), in(kBytes);
  for (size_t i = 0; i < kBytes; ++i) out[i] = char(i * 7 + 3);
  Pacer pacer(40e6);
  StickyError err;
  Xfer x;
  x.pending = 1;
  const auto t0 = Clock::now();
  {
    SocketWorker w({fds[0]}, &err, "test", &pacer);
    w.push(0, true, out.data(), kBytes, &x);
    size_t got = 0;
    while (got < kBytes) {
      const ssize_t r = read(fds[1], in.data() + got, kBytes - got);
      ASSERT_GT(r, 0);
      got += size_t(r);
    }
    while (!x.done()) std::this_thread::yield();
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(s, (double(kBytes) - 65536) / 40e6 * 0.99);
  EXPECT_EQ(err.code(), ncclSuccess);
  EXPECT_EQ(in, out);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace zipccl::tcp
