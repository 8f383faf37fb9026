// The send-rate cap of NCCL_ZIP_SOCKET_PACE_MBPS: a Pacer never grants more than its rate plus
// its burst, and workers sending through one (a device's connections) move their tasks no
// faster together, every byte intact.
// Bounds are one-sided where a loaded machine can only make things slower.
#include "pacer.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <memory>
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

// Workers (connections) sending through one pacer (their device's) over socket pairs, each
// `bytes`: seconds taken, every byte checked.
double send_through(Pacer* pacer, int workers, size_t bytes) {
  std::vector<std::array<int, 2>> fds(static_cast<size_t>(workers));
  for (auto& f : fds) EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, f.data()), 0);
  std::vector<char> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = char(i * 7 + 3);
  StickyError err;
  std::vector<Xfer> x(static_cast<size_t>(workers));
  const auto t0 = Clock::now();
  {
    std::vector<std::unique_ptr<SocketWorker>> ws;
    for (int w = 0; w < workers; ++w) {
      ws.push_back(std::make_unique<SocketWorker>(std::vector<int>{fds[size_t(w)][0]}, &err, "test", pacer));
      x[size_t(w)].pending = 1;
      ws.back()->push(0, true, out.data(), bytes, &x[size_t(w)]);
    }
    std::vector<std::thread> readers;
    for (int w = 0; w < workers; ++w)
      readers.emplace_back([&, w] {
        std::vector<char> in(bytes);
        size_t got = 0;
        while (got < bytes) {
          const ssize_t r = read(fds[size_t(w)][1], in.data() + got, bytes - got);
          if (r <= 0) break;
          got += size_t(r);
        }
        EXPECT_EQ(in, out) << "connection " << w;
      });
    for (auto& t : readers) t.join();
    for (auto& xf : x)
      while (!xf.done()) std::this_thread::yield();
  }
  EXPECT_EQ(err.code(), ncclSuccess);
  for (auto& f : fds) {
    close(f[0]);
    close(f[1]);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A worker sending 8 MB through a 40 MB/s pacer: at least 0.2 s (less its 64 KiB burst).
TEST(Pacer, WorkerSendsAtTheCappedRate) {
  Pacer pacer(40e6);
  EXPECT_GE(send_through(&pacer, 1, 8 << 20), (double(8 << 20) - 65536) / 40e6 * 0.99);
}

// Two connections through one device share its cap, as on a NIC: 2 x 4 MB take as long as 8 MB.
TEST(Pacer, ConnectionsOfADeviceShareItsCap) {
  Pacer pacer(40e6);
  EXPECT_GE(send_through(&pacer, 2, 4 << 20), (double(8 << 20) - 65536) / 40e6 * 0.99);
}

}  // namespace
}  // namespace zipccl::tcp
