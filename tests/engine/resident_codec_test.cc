// ResidentCodec over the emulated kernel (emulated_service.h): leases only while the kernel runs,
// every posted job finished, idle exit, restarts, and a launcher that blocks, fails or starts
// late never making the caller wait.
#include "resident_codec.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "bf16_data.h"
#include "emulated_service.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

using enginetest::bf16_data;

gpu::ServiceJob encode_job(const Bytes& in, Bytes& out) {
  gpu::ServiceJob j{};
  j.op = gpu::kServiceEncode;
  j.in = in.data();
  j.in_bytes = in.size();
  j.out = out.data();
  j.out_cap = out.size();
  j.limit = coded_limit(in.size(), 1.0);
  j.codec = uint8_t(Codec::BF16);
  return j;
}

gpu::ServiceJob decode_job(const Bytes& in, size_t n, Bytes& out) {
  gpu::ServiceJob j{};
  j.op = gpu::kServiceDecode;
  j.in = in.data();
  j.in_bytes = n;
  j.out = out.data();
  j.out_cap = out.size();
  return j;
}

class Resident : public ::testing::Test {
 protected:
  void make(ResidentCodec::Options o = options()) {
    codec_ = ResidentCodec::create(std::make_unique<EmulatedServiceDevice>(ctl_), o);
  }
  static ResidentCodec::Options options() {
    ResidentCodec::Options o;
    o.idle_us = 2000;
    o.retry_ms = 20;
    o.exit_wait_ms = 2000;
    return o;
  }
  void TearDown() override {
    if (codec_) {
      EXPECT_TRUE(codec_->shutdown());
    }
    codec_.reset();
  }
  // Asks for a lease until granted (the launcher starts the kernel meanwhile).
  bool lease(std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const auto end = Clock::now() + limit;
    while (!codec_->acquire()) {
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
  }
  gpu::Result wait(uint64_t index) {
    gpu::Result r{};
    const auto end = Clock::now() + std::chrono::seconds(5);
    while (!codec_->poll(index, &r)) {
      if (Clock::now() > end) {
        ADD_FAILURE() << "job " << index << " never finished";
        return gpu::Result{};
      }
    }
    return r;
  }
  // Polls without spinning: on a loaded 2-core machine a spinning test thread takes the core the
  // launcher thread needs to make the change it waits for.
  bool state_within(ResidentCodec::State s, std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (codec_->state() != s) {
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
  }
  // One message through encode and decode under one lease, checked against the CPU codec.
  void round_trip(const Bytes& x) {
    Bytes msg(max_compressed_bytes(x.size())), back(x.size() + 64), ref(msg.size());
    size_t ref_len = 0;
    ASSERT_EQ(encode(Codec::BF16, x.data(), x.size(), ref.data(), ref.size(), &ref_len), Status::kOk);
    uint64_t i = 0;
    ASSERT_TRUE(codec_->post(encode_job(x, msg), &i));
    gpu::Result r = wait(i);
    ASSERT_EQ(r.status, int(Status::kOk));
    ASSERT_EQ(r.bytes, ref_len);
    ASSERT_EQ(0, std::memcmp(msg.data(), ref.data(), ref_len));
    ASSERT_TRUE(codec_->post(decode_job(msg, r.bytes, back), &i));
    r = wait(i);
    ASSERT_EQ(r.status, int(Status::kOk));
    ASSERT_EQ(r.bytes, x.size());
    ASSERT_EQ(0, std::memcmp(back.data(), x.data(), x.size()));
  }

  std::shared_ptr<EmulatedServiceDevice::Control> ctl_ = std::make_shared<EmulatedServiceDevice::Control>();
  std::shared_ptr<ResidentCodec> codec_;
};

TEST_F(Resident, LeaseOnlyOnceTheKernelRunsAndItExitsWhenIdle) {
  make();
  EXPECT_EQ(codec_->state(), ResidentCodec::kStopped);
  EXPECT_FALSE(codec_->acquire()) << "a lease before any kernel runs";
  ASSERT_TRUE(lease());
  // A kernel that saw no lease for an idle time may have exited before this one was granted (a
  // loaded machine can oversleep the 50 us retry); from the grant on, the same kernel serves.
  const int launches = ctl_->launches.load();
  EXPECT_EQ(codec_->state(), ResidentCodec::kRunning);
  EXPECT_EQ(ctl_->running.load(), 1);
  ASSERT_NO_FATAL_FAILURE(round_trip(bf16_data(300000, 1)));
  // Held for several idle periods: it stays.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(codec_->state(), ResidentCodec::kRunning);
  EXPECT_EQ(ctl_->running.load(), 1);
  codec_->release();
  EXPECT_TRUE(state_within(ResidentCodec::kStopped, std::chrono::milliseconds(500)));
  EXPECT_EQ(ctl_->running.load(), 0);
  EXPECT_EQ(ctl_->launches.load(), launches);
}

// Bursts separated by gaps around the idle time: every message exact, never two kernels, and the
// kernel gone whenever a gap outlasted the idle time by a margin.
TEST_F(Resident, BurstsAroundTheIdleTime) {
  ResidentCodec::Options o = options();
  o.idle_us = 300;
  make(o);
  std::mt19937 g(7);
  const Bytes x = bf16_data(64 << 10, 2);
  int stopped_seen = 0;
  for (int cycle = 0; cycle < 1500; ++cycle) {
    ASSERT_TRUE(lease()) << "cycle " << cycle;
    const int burst = 1 + int(g() % 3);
    for (int k = 0; k < burst; ++k) {
      const size_t n = 2 * (g() % (x.size() / 2));
      ASSERT_NO_FATAL_FAILURE(round_trip(Bytes(x.begin(), x.begin() + long(n)))) << "cycle " << cycle;
    }
    codec_->release();
    const int64_t gap_us = int64_t(g() % 700);  // 0 .. 2.3x the idle time
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    if (gap_us > 600) {
      // Idle for 2x its idle time: it must be stopping or stopped by now, given a moment.
      ASSERT_TRUE(state_within(ResidentCodec::kStopped, std::chrono::milliseconds(200))) << "cycle " << cycle;
      ++stopped_seen;
    }
  }
  EXPECT_GT(stopped_seen, 100);
  EXPECT_EQ(ctl_->max_running.load(), 1);
  EXPECT_GT(ctl_->launches.load(), stopped_seen / 2);
}

// The launcher stuck inside a CUDA call: every acquire answers at once (no lease), and when the
// call returns, the kernel runs and leases are granted.
TEST_F(Resident, BlockedLauncherNeverMakesTheCallerWait) {
  ctl_->block_launch = true;
  make();
  const auto end = Clock::now() + std::chrono::milliseconds(200);
  int64_t worst_ns = 0;
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    EXPECT_FALSE(codec_->acquire());
    worst_ns = std::max<int64_t>(worst_ns, std::chrono::nanoseconds(Clock::now() - t0).count());
  }
  // Bounded far below the 200 ms the launcher is held (a loaded machine may preempt us for ms).
  EXPECT_LT(worst_ns, 50000000) << "an acquire took " << worst_ns << " ns";
  EXPECT_EQ(codec_->state(), ResidentCodec::kStarting);
  EXPECT_EQ(ctl_->launches.load(), 1);
  ctl_->block_launch = false;
  ASSERT_TRUE(lease());
  ASSERT_NO_FATAL_FAILURE(round_trip(bf16_data(4096, 3)));
  codec_->release();
}

// shutdown() does not wait forever for a launcher stuck in a CUDA call; the launcher ends later
// on its own, holding the object until then.
TEST_F(Resident, ShutdownLeavesABlockedLauncher) {
  ctl_->block_launch = true;
  ResidentCodec::Options o = options();
  o.exit_wait_ms = 50;
  make(o);
  EXPECT_FALSE(codec_->acquire());
  while (ctl_->launches.load() == 0) std::this_thread::yield();
  const auto t0 = Clock::now();
  EXPECT_FALSE(codec_->shutdown());
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
  std::weak_ptr<ResidentCodec> weak = codec_;
  codec_.reset();
  EXPECT_FALSE(weak.expired()) << "the launcher still holds it";
  ctl_->block_launch = false;  // the call returns: the launcher stops the kernel and goes
  const auto end = Clock::now() + std::chrono::seconds(5);
  while (!weak.expired()) ASSERT_LT(Clock::now(), end) << "the launcher never ended";
  EXPECT_EQ(ctl_->running.load(), 0);
}

// A shutdown that says the launcher ended has joined its thread: none of it runs on past the
// call (NCCL unloads the plugin once its last communicator is gone), and it holds the object no
// more. A second call says the same.
TEST_F(Resident, ShutdownJoinsTheLauncher) {
  make();
  ASSERT_TRUE(lease());
  codec_->release();
  ASSERT_TRUE(codec_->shutdown());
  EXPECT_EQ(codec_.use_count(), 1) << "the launcher still holds the object";
  EXPECT_TRUE(codec_->shutdown());
}

TEST_F(Resident, FailedLaunchIsRetried) {
  ctl_->fail_launch = true;
  make();
  EXPECT_FALSE(lease(std::chrono::milliseconds(100)));
  EXPECT_GE(ctl_->launches.load(), 2) << "retried every 20 ms";
  EXPECT_LE(ctl_->launches.load(), 7);
  ctl_->fail_launch = false;
  ASSERT_TRUE(lease());
  ASSERT_NO_FATAL_FAILURE(round_trip(bf16_data(10000, 4)));
  codec_->release();
}

// A kernel started on demand waits start_grace_us for its asker, who comes back on NCCL's next
// call, before its idle exit; without the grace one who comes back after the idle time finds it
// gone, and asks for another start.
TEST_F(Resident, AKernelStartedOnDemandWaitsForItsAsker) {
  for (const int64_t grace_us : {int64_t(500000), int64_t(0)}) {
    ResidentCodec::Options o = options();
    o.idle_us = 100;
    o.start_grace_us = grace_us;
    make(o);
    EXPECT_FALSE(codec_->acquire());  // the demand
    const auto end = Clock::now() + std::chrono::seconds(5);
    while (ctl_->launches.load() == 0) ASSERT_LT(Clock::now(), end) << "the kernel was not started";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // 500 idle times
    if (grace_us) {
      EXPECT_TRUE(codec_->acquire()) << "still there for its asker";
      codec_->release();
      EXPECT_EQ(ctl_->launches.load(), 1);
      while (codec_->state() != ResidentCodec::kStopped) ASSERT_LT(Clock::now(), end) << "no idle exit after use";
    } else {
      EXPECT_FALSE(codec_->acquire()) << "exited after its idle time";
    }
    ASSERT_TRUE(codec_->shutdown());
    codec_.reset();
    ctl_->launches = 0;
  }
}

// A prewarm (the tuner's word that a compressed collective is coming) starts the kernel with no
// lease asked; it waits the start grace for the leases, then exits when idle. One where it runs
// starts nothing.
TEST_F(Resident, APrewarmStartsTheKernelForTheLeasesToCome) {
  ResidentCodec::Options o = options();
  o.idle_us = 100;
  o.start_grace_us = 500000;
  make(o);
  codec_->prewarm();
  const auto end = Clock::now() + std::chrono::seconds(5);
  while (codec_->state() != ResidentCodec::kRunning) ASSERT_LT(Clock::now(), end) << "the kernel was not started";
  EXPECT_EQ(ctl_->launches.load(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // 200 idle times, within the grace
  codec_->prewarm();
  EXPECT_TRUE(codec_->acquire()) << "there for the leases that follow";
  codec_->release();
  EXPECT_EQ(ctl_->launches.load(), 1);
  while (codec_->state() != ResidentCodec::kStopped) ASSERT_LT(Clock::now(), end) << "no idle exit";
}

// A launch queued behind other work: no lease until the kernel says it runs; the start's time,
// from the first lease asked for, and its parts in the summary logged at shutdown.
TEST_F(Resident, NoLeaseBeforeTheKernelRuns) {
  ctl_->start_delay_us = 50000;
  // Idle for a second before it exits: a loaded machine can hold the polling lease() past the
  // default 2 ms between the start and its next ask, and a second start would count.
  ResidentCodec::Options o = options();
  o.idle_us = 1000000;
  make(o);
  EXPECT_EQ(codec_->start_summary(), "");
  EXPECT_EQ(codec_->start_us(0.5), -1);
  const auto t0 = Clock::now();
  ASSERT_TRUE(lease());
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(45));
  EXPECT_EQ(ctl_->running.load(), 1);
  codec_->release();
  ASSERT_TRUE(codec_->shutdown());
  const std::string s = codec_->start_summary();
  long long median_us = -1, max_us = -1, awake_us = -1, call_us = -1, run_us = -1;
  ASSERT_EQ(sscanf(s.c_str(),
                   "started 1 times, %lld us median from demand to running (p90 %*d, max %lld; medians: awake %lld, "
                   "launch call %lld, to running %lld)",
                   &median_us, &max_us, &awake_us, &call_us, &run_us),
            5)
      << s;
  EXPECT_GE(median_us, 45000) << s;
  EXPECT_EQ(max_us, median_us) << s;
  EXPECT_EQ(codec_->start_us(0.5), median_us);
  EXPECT_EQ(codec_->start_us(0.9), median_us);
  // The delay is the kernel's, after its launch call returned; the parts add up to the whole.
  EXPECT_GE(run_us, 45000) << s;
  EXPECT_LE(awake_us + call_us + run_us, median_us + 2) << s;
  EXPECT_GE(awake_us + call_us + run_us, median_us - 2) << s;
}

// 256 jobs out and none read: the next post is refused (the caller goes raw) until one is read.
TEST_F(Resident, FullRingRefusesAPost) {
  make();
  ASSERT_TRUE(lease());
  const Bytes x = bf16_data(2048, 5);
  std::vector<Bytes> out(gpu::kServiceRing + 1, Bytes(max_compressed_bytes(x.size())));
  std::vector<uint64_t> idx(gpu::kServiceRing);
  for (uint32_t i = 0; i < gpu::kServiceRing; ++i) ASSERT_TRUE(codec_->post(encode_job(x, out[i]), &idx[i]));
  uint64_t extra = 0;
  EXPECT_FALSE(codec_->post(encode_job(x, out.back()), &extra));
  EXPECT_EQ(wait(idx[0]).status, int(Status::kOk));
  ASSERT_TRUE(codec_->post(encode_job(x, out.back()), &extra));
  for (uint32_t i = 1; i < gpu::kServiceRing; ++i) EXPECT_EQ(wait(idx[i]).status, int(Status::kOk));
  EXPECT_EQ(wait(extra).status, int(Status::kOk));
  codec_->release();
}

// Progress threads of several communicators lease, post and poll at once.
TEST_F(Resident, ConcurrentUsers) {
  ResidentCodec::Options o = options();
  o.idle_us = 100;
  make(o);
  std::vector<std::thread> ts;
  std::atomic<int> failures{0}, coded{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 g(100 + t);
      const Bytes x = bf16_data(200000, 10 + t);
      for (int k = 0; k < 300; ++k) {
        if (!codec_->acquire()) {
          std::this_thread::sleep_for(std::chrono::microseconds(g() % 300));
          continue;
        }
        const size_t n = 2 * (g() % (x.size() / 2));
        Bytes in(x.begin(), x.begin() + long(n)), msg(max_compressed_bytes(n)), back(n + 8), ref(msg.size());
        size_t ref_len = 0;
        encode(Codec::BF16, in.data(), n, ref.data(), ref.size(), &ref_len);
        uint64_t i = 0;
        if (codec_->post(encode_job(in, msg), &i)) {
          gpu::Result r{};
          while (!codec_->poll(i, &r)) {
          }
          if (r.bytes != ref_len || std::memcmp(msg.data(), ref.data(), ref_len) != 0) failures++;
          coded++;
        }
        codec_->release();
        std::this_thread::sleep_for(std::chrono::microseconds(g() % 300));
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(coded.load(), 100);
  EXPECT_EQ(ctl_->max_running.load(), 1);
}

// A kernel that never exits: the launcher gives up after exit_wait_ms, no lease is granted again,
// and its memory is never freed under it.
TEST_F(Resident, KernelThatNeverExitsTurnsTheCodecOff) {
  ResidentCodec::Options o = options();
  o.idle_us = 20000;  // not stopped before the test gets its lease, however loaded the machine
  o.exit_wait_ms = 50;
  make(o);
  ctl_->ignore_stop = true;
  ASSERT_TRUE(lease());
  codec_->release();
  EXPECT_TRUE(state_within(ResidentCodec::kStopping, std::chrono::milliseconds(500)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(codec_->acquire());
  EXPECT_EQ(codec_->state(), ResidentCodec::kStopping);
  EXPECT_TRUE(codec_->shutdown());
  codec_.reset();  // leaks the emulated device, whose kernel thread still runs
  ctl_->ignore_stop = false;  // now it exits; its host memory was never freed
  const auto end = Clock::now() + std::chrono::seconds(5);
  while (ctl_->running.load() != 0) ASSERT_LT(Clock::now(), end);
  delete ctl_->device.load();  // what the codec left behind, now that nothing uses it
}

}  // namespace
}  // namespace zipccl
