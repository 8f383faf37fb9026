// A helper thread that polls on after its work (NCCL_ZIP_SOCKET_SPIN_US) moves every byte of
// messages that come just after each other and with gaps, spins (uses the CPU) inside its window,
// and sleeps once the window has passed: a thread left spinning would take a core from the
// application for as long as the connection lives.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "socket_worker.h"

namespace zipccl::tcp {
namespace {

double cpu_seconds() {  // every thread of the process
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// A sending and a receiving helper on the two ends of a socket pair, both spinning spin_ns.
struct Pair {
  explicit Pair(int64_t spin_ns) {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    tx = std::make_unique<SocketWorker>(std::vector<int>{fds[0]}, &err, "test", nullptr, nullptr, spin_ns);
    rx = std::make_unique<SocketWorker>(std::vector<int>{fds[1]}, &err, "test", nullptr, nullptr, spin_ns);
  }
  ~Pair() {
    tx.reset();
    rx.reset();
    close(fds[0]);
    close(fds[1]);
  }
  // One message of n bytes through both helpers; false unless it arrived intact.
  bool move(size_t n, uint32_t seed) {
    std::vector<char> out(n), in(n, 0);
    for (size_t i = 0; i < n; ++i) out[i] = char(seed + i * 131);
    Xfer s, r;
    s.pending = 1;
    r.pending = 1;
    rx->push(0, false, in.data(), n, &r);
    tx->push(0, true, out.data(), n, &s);
    while (!s.done() || !r.done()) std::this_thread::yield();
    return in == out && err.code() == ncclSuccess;
  }
  int fds[2];
  StickyError err;
  std::unique_ptr<SocketWorker> tx, rx;
};

TEST(HelperSpin, MovesEveryByteBackToBackAndAfterGaps) {
  Pair p(200000);  // 200 us
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    const size_t n = 1 + rng() % (256 << 10);
    ASSERT_TRUE(p.move(n, uint32_t(i))) << "message " << i << " of " << n << " bytes";
    // Now and then a gap around the spin time: the helpers go to sleep and must wake for the next.
    if (i % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
  }
}

TEST(HelperSpin, SpinsInsideItsWindowAndSleepsAfter) {
  Pair p(300000000);  // 300 ms: long enough to see on a loaded machine
  ASSERT_TRUE(p.move(4096, 1));
  double t0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double spinning = cpu_seconds() - t0;
  // Two yielding threads for 100 ms: far more than 10 ms of CPU even with other tests beside.
  EXPECT_GT(spinning, 0.01) << "the helpers slept inside their spin window";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the window
  t0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LT(cpu_seconds() - t0, 0.02) << "the helpers kept spinning with nothing to do";
}

TEST(HelperSpin, OffSleepsAtOnce) {
  Pair p(0);
  ASSERT_TRUE(p.move(4096, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double t0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LT(cpu_seconds() - t0, 0.02);
}

}  // namespace
}  // namespace zipccl::tcp
