// ResidentEngine over the emulated kernel: jobs go to the GPU under a lease, to the CPU engine
// otherwise (launcher blocked, kernel idle, job too large), and every result is the CPU codec's.
#include "resident_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "bf16_data.h"
#include "emulated_service.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

using enginetest::bf16_data;

void set_job(CodecJob* j, CodecJob::Op op, const void* src, size_t src_bytes, void* dst, size_t dst_cap, bool gpu_ok) {
  j->op = op;
  j->gpu_ok = gpu_ok;
  j->src = src;
  j->src_bytes = src_bytes;
  j->dst = dst;
  j->dst_cap = dst_cap;
}

class ResidentEngineTest : public ::testing::Test {
 protected:
  // Idle time long by default: a loaded machine may pause the test between jobs for ms.
  void SetUp() override { make(200000); }
  void make(int64_t idle_us) {
    if (engine_) TearDown();
    ResidentCodec::Options o;
    o.idle_us = idle_us;
    o.retry_ms = 20;
    gpu_ = ResidentCodec::create(std::make_unique<EmulatedServiceDevice>(ctl_), o);
    cpu_ = acquire_cpu_codec();
    engine_ = std::make_unique<ResidentEngine>(gpu_, cpu_, cpu_encodes_);
  }
  void TearDown() override {
    engine_.reset();
    release_cpu_codec();
    EXPECT_TRUE(gpu_->shutdown());
  }
  // Starts the kernel: jobs submitted right after go to the GPU.
  void warm() {
    const auto end = Clock::now() + std::chrono::seconds(5);
    while (!gpu_->acquire()) ASSERT_LT(Clock::now(), end);
    gpu_->release();
  }
  void run(CodecJob* j) {
    engine_->submit(j);
    run_to_done(j);
  }
  void run_to_done(CodecJob* j) {
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (!j->done()) {
      engine_->poll();
      ASSERT_LT(Clock::now(), end) << "job never finished";
    }
  }
  // Encodes and decodes x through the engine; both checked against the CPU codec.
  void round_trip(const Bytes& x) {
    Bytes msg(max_compressed_bytes(x.size())), back(x.size() + 16), ref(msg.size());
    size_t ref_len = 0;
    const Codec c = classify(x.data(), x.size());
    ASSERT_EQ(encode(c, x.data(), x.size(), ref.data(), ref.size(), &ref_len), Status::kOk);
    CodecJob e;
    set_job(&e, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
    ASSERT_NO_FATAL_FAILURE(run(&e));
    ASSERT_EQ(e.status, Status::kOk);
    ASSERT_EQ(e.out_bytes, ref_len);
    ASSERT_EQ(0, std::memcmp(msg.data(), ref.data(), ref_len));
    CodecJob d;
    set_job(&d, CodecJob::kDecode, msg.data(), e.out_bytes, back.data(), x.size(), true);
    ASSERT_NO_FATAL_FAILURE(run(&d));
    ASSERT_EQ(d.status, Status::kOk);
    ASSERT_EQ(d.out_bytes, x.size());
    ASSERT_EQ(0, std::memcmp(back.data(), x.data(), x.size()));
  }

  std::shared_ptr<EmulatedServiceDevice::Control> ctl_ = std::make_shared<EmulatedServiceDevice::Control>();
  std::shared_ptr<ResidentCodec> gpu_;
  CodecEngine* cpu_ = nullptr;
  std::unique_ptr<ResidentEngine> engine_;
  bool cpu_encodes_ = true;
};

TEST_F(ResidentEngineTest, JobsGoToTheRunningKernel) {
  std::vector<Bytes> xs;  // made first: generating them takes longer than the idle time
  for (int k = 0; k < 10; ++k) xs.push_back(bf16_data(100000 + 2 * k, k));
  ASSERT_NO_FATAL_FAILURE(warm());
  for (const Bytes& x : xs) ASSERT_NO_FATAL_FAILURE(round_trip(x));
  EXPECT_EQ(engine_->gpu_jobs(), 20u);
  EXPECT_EQ(engine_->cpu_jobs(), 0u);
  EXPECT_EQ(ctl_->jobs.load(), 20u);
  EXPECT_EQ(ctl_->host_decodes.load(), 10u) << "host memory is posted as such (the kernel stages it ahead)";
  EXPECT_GT(engine_->throughput(CodecJob::kEncode), 0);
  EXPECT_GT(engine_->throughput(CodecJob::kDecode), 0);
}

// The first job finds no kernel and goes to the CPU; the kernel it asked for takes later ones.
TEST_F(ResidentEngineTest, NoKernelYetMeansTheCpu) {
  const Bytes x = bf16_data(50000, 1);
  Bytes msg(max_compressed_bytes(x.size()));
  CodecJob e;
  set_job(&e, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
  ASSERT_NO_FATAL_FAILURE(run(&e));
  EXPECT_EQ(e.status, Status::kOk);
  EXPECT_EQ(engine_->cpu_jobs(), 1u);
  EXPECT_EQ(engine_->gpu_jobs(), 0u);
  EXPECT_EQ(engine_->throughput(CodecJob::kEncode), 0) << "no GPU job has measured it";
  const auto end = Clock::now() + std::chrono::seconds(5);
  while (gpu_->state() != ResidentCodec::kRunning) ASSERT_LT(Clock::now(), end) << "the kernel was not started";
  ASSERT_NO_FATAL_FAILURE(round_trip(x));
  EXPECT_EQ(engine_->gpu_jobs(), 2u);
}

// The first GPU job gives a rate, which the policy does not trust to be low until 4 MiB more
// have been coded (CodecEngine::throughput_settled).
TEST_F(ResidentEngineTest, TheRateSettlesOverAWindowOfJobs) {
  const Bytes x = bf16_data(1 << 20, 3);
  Bytes msg(max_compressed_bytes(x.size()));
  ASSERT_NO_FATAL_FAILURE(warm());
  for (int k = 0; k < 6; ++k) {
    CodecJob e;
    set_job(&e, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
    ASSERT_NO_FATAL_FAILURE(run(&e));
    ASSERT_TRUE(e.on_gpu);
    EXPECT_GT(engine_->throughput(CodecJob::kEncode), 0) << "job " << k;
    EXPECT_EQ(engine_->throughput_settled(CodecJob::kEncode), k >= 4) << "job " << k << ": 1 MiB each";
  }
  EXPECT_FALSE(engine_->throughput_settled(CodecJob::kDecode)) << "no decode has been measured";
}

// An encode alone on an idle kernel, coded in small tiles (gpu::Result::small_tiles), spends more
// CTA time per byte than the kernel's capacity needs: it gives a first rate, and once one is
// measured, more than a window of them leaves it as it is.
TEST_F(ResidentEngineTest, LoneSmallEncodesGiveOnlyAFirstRate) {
  const Bytes small = bf16_data(gpu::kServiceSmallTile * gpu_->ctas(), 4), large = bf16_data(1 << 20, 5);
  Bytes msg(max_compressed_bytes(large.size()));
  const auto encode_on_gpu = [&](const Bytes& x) {
    CodecJob e;
    set_job(&e, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
    ASSERT_NO_FATAL_FAILURE(run(&e));
    ASSERT_EQ(e.status, Status::kOk);
    ASSERT_TRUE(e.on_gpu);
  };
  ASSERT_NO_FATAL_FAILURE(warm());
  ASSERT_NO_FATAL_FAILURE(encode_on_gpu(small));
  ASSERT_EQ(ctl_->small_tile_jobs, 1u);
  EXPECT_GT(engine_->throughput(CodecJob::kEncode), 0) << "the first rate";
  EXPECT_FALSE(engine_->throughput_settled(CodecJob::kEncode));
  for (int k = 0; k < 5; ++k) ASSERT_NO_FATAL_FAILURE(encode_on_gpu(large));
  ASSERT_EQ(ctl_->small_tile_jobs, 1u) << "1 MiB does not fit 16 small tiles";
  ASSERT_TRUE(engine_->throughput_settled(CodecJob::kEncode));
  const double rate = engine_->throughput(CodecJob::kEncode);
  const int n = int((6u << 20) / small.size());
  for (int k = 0; k < n; ++k) ASSERT_NO_FATAL_FAILURE(encode_on_gpu(small));
  EXPECT_EQ(ctl_->small_tile_jobs, uint64_t(n) + 1);
  EXPECT_EQ(engine_->throughput(CodecJob::kEncode), rate);
}

TEST_F(ResidentEngineTest, BlockedLauncherSendsEverythingToTheCpu) {
  ctl_->block_launch = true;
  for (int k = 0; k < 5; ++k) ASSERT_NO_FATAL_FAILURE(round_trip(bf16_data(70000, 10 + k)));
  EXPECT_EQ(engine_->gpu_jobs(), 0u);
  EXPECT_EQ(engine_->cpu_jobs(), 10u);
  ctl_->block_launch = false;
}

// Memory the GPU cannot address (gpu_ok false: heap staging, unmapped buffers) stays on the CPU.
TEST_F(ResidentEngineTest, UnmappedMemoryStaysOnTheCpu) {
  ASSERT_NO_FATAL_FAILURE(warm());
  const Bytes x = bf16_data(100000, 8);
  Bytes msg(max_compressed_bytes(x.size()));
  CodecJob e;
  set_job(&e, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), false);
  ASSERT_NO_FATAL_FAILURE(run(&e));
  EXPECT_EQ(e.status, Status::kOk);
  EXPECT_FALSE(e.on_gpu);
  EXPECT_EQ(engine_->cpu_jobs(), 1u);
  e.gpu_ok = true;
  e.state.store(CodecJob::kIdle);
  ASSERT_NO_FATAL_FAILURE(run(&e));
  EXPECT_TRUE(e.on_gpu);
  EXPECT_EQ(engine_->gpu_jobs(), 1u);
}

// Without CPU encodes (auto mode), an encode the GPU cannot take is skipped (sent raw); a
// decode still goes to the CPU.
TEST_F(ResidentEngineTest, WithoutCpuEncodesAnEncodeIsSkipped) {
  cpu_encodes_ = false;
  ctl_->block_launch = true;
  make(200000);
  const Bytes x = bf16_data(100000, 9);
  Bytes msg(max_compressed_bytes(x.size())), back(x.size());
  CodecJob e;
  set_job(&e, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
  ASSERT_NO_FATAL_FAILURE(run(&e));
  EXPECT_TRUE(e.skipped);
  EXPECT_EQ(e.codec, Codec::Raw);
  EXPECT_EQ(engine_->skipped_jobs(), 1u);
  size_t len = 0;
  ASSERT_EQ(encode(Codec::BF16, x.data(), x.size(), msg.data(), msg.size(), &len), Status::kOk);
  CodecJob d;
  set_job(&d, CodecJob::kDecode, msg.data(), len, back.data(), back.size(), true);
  ASSERT_NO_FATAL_FAILURE(run(&d));
  EXPECT_FALSE(d.skipped);
  EXPECT_EQ(d.status, Status::kOk);
  EXPECT_EQ(back, x);
  EXPECT_EQ(engine_->cpu_jobs(), 1u);
  ctl_->block_launch = false;
}

// Device memory (gpu_only) is the kernel's alone: an encode it cannot take is skipped even where
// the CPU would encode, and a decode waits for it (its receiver holds a lease: the kernel comes).
TEST_F(ResidentEngineTest, GpuOnlyJobsNeverReachTheCpu) {
  ctl_->block_launch = true;
  const Bytes x = bf16_data(100000, 11);
  Bytes msg(max_compressed_bytes(x.size())), back(x.size());
  CodecJob e;
  set_job(&e, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
  e.gpu_only = true;
  ASSERT_NO_FATAL_FAILURE(run(&e));
  EXPECT_TRUE(e.skipped);
  size_t len = 0;
  ASSERT_EQ(encode(Codec::BF16, x.data(), x.size(), msg.data(), msg.size(), &len), Status::kOk);
  CodecJob d;
  set_job(&d, CodecJob::kDecode, msg.data(), len, back.data(), back.size(), true);
  d.gpu_only = true;
  engine_->submit(&d);
  const auto until = Clock::now() + std::chrono::milliseconds(100);
  while (Clock::now() < until) {
    engine_->poll();
    ASSERT_FALSE(d.done()) << "decoded with no kernel running";
  }
  ctl_->block_launch = false;
  const auto end = Clock::now() + std::chrono::seconds(10);
  while (!d.done()) {
    engine_->poll();
    ASSERT_LT(Clock::now(), end) << "the decode never reached the kernel";
  }
  EXPECT_TRUE(d.on_gpu);
  EXPECT_EQ(d.status, Status::kOk);
  EXPECT_EQ(back, x);
  EXPECT_EQ(engine_->cpu_jobs(), 0u);
  EXPECT_EQ(ctl_->host_decodes, 0u) << "device memory posted as host memory";
}

// A gpu_only decode no kernel job can hold (a peer's claim beyond kServiceMaxJob), or one
// cancelled while it waits, completes with an error instead of waiting forever.
TEST_F(ResidentEngineTest, GpuOnlyDecodeThatCannotRunCompletes) {
  Bytes msg(4096), out(16);
  CodecJob big;
  set_job(&big, CodecJob::kDecode, msg.data(), msg.size(), out.data(), gpu::kServiceMaxJob + 1, true);
  big.gpu_only = true;
  ASSERT_NO_FATAL_FAILURE(run(&big));
  EXPECT_EQ(big.status, Status::kTooLarge);
  ctl_->block_launch = true;
  CodecJob c;
  set_job(&c, CodecJob::kDecode, msg.data(), msg.size(), out.data(), out.size(), true);
  c.gpu_only = true;
  engine_->submit(&c);
  engine_->poll();
  EXPECT_FALSE(c.done());
  c.cancel();
  ASSERT_NO_FATAL_FAILURE(run_to_done(&c));
  EXPECT_EQ(c.status, Status::kNoSpace);
  EXPECT_EQ(engine_->cpu_jobs(), 0u);
  ctl_->block_launch = false;
}

TEST_F(ResidentEngineTest, JobsBeyondTheKernelsLimitGoToTheCpu) {
  ASSERT_NO_FATAL_FAILURE(warm());
  ASSERT_NO_FATAL_FAILURE(round_trip(bf16_data(gpu::kServiceMaxJob + 2, 3)));
  EXPECT_EQ(engine_->cpu_jobs(), 2u);
}

// Corrupt messages: the same status whichever side decodes them.
TEST_F(ResidentEngineTest, CorruptMessageStatusIsTheCpus) {
  const Bytes x = bf16_data(200000, 4);
  Bytes msg(max_compressed_bytes(x.size()));
  size_t len = 0;
  ASSERT_EQ(encode(Codec::BF16, x.data(), x.size(), msg.data(), msg.size(), &len), Status::kOk);
  std::mt19937 g(5);
  for (int k = 0; k < 20; ++k) {
    Bytes m(msg.begin(), msg.begin() + long(len));
    m[g() % len] ^= uint8_t(1 + g() % 255);
    Bytes out(x.size()), ref(x.size());
    size_t ref_len = 0;
    const Status want = decode(m.data(), m.size(), ref.data(), ref.size(), &ref_len);
    if (k % 2) {
      ASSERT_NO_FATAL_FAILURE(warm());
    }
    CodecJob d;
    set_job(&d, CodecJob::kDecode, m.data(), m.size(), out.data(), out.size(), true);
    ASSERT_NO_FATAL_FAILURE(run(&d));
    EXPECT_EQ(d.status, want) << "corruption " << k;
  }
}

// Jobs while the kernel comes and goes (idle exits between them): each on one side, all right.
TEST_F(ResidentEngineTest, KernelComingAndGoing) {
  make(1000);
  std::mt19937 g(6);
  const Bytes x = bf16_data(300000, 7);
  for (int k = 0; k < 200; ++k) {
    const size_t n = 2 * (g() % (x.size() / 2));
    ASSERT_NO_FATAL_FAILURE(round_trip(Bytes(x.begin(), x.begin() + long(n)))) << "job " << k;
    std::this_thread::sleep_for(std::chrono::microseconds(g() % 2000));
  }
  EXPECT_GT(engine_->gpu_jobs(), 0u);
  EXPECT_EQ(engine_->gpu_jobs() + engine_->cpu_jobs(), 400u);
}

// Each job waits 20 ms in the kernel's queue before it is coded (as behind a busy GPU or a slow
// poll): the throughput is the coding rate, well above bytes over the time from post to result.
TEST_F(ResidentEngineTest, ThroughputIsTheKernelsCapacityNotItsLatency) {
  ctl_->job_wait_us = 20000;
  const Bytes x = bf16_data(1 << 20, 7);
  Bytes msg(max_compressed_bytes(x.size()));
  warm();
  double latency = 0;
  for (int k = 0; k < 6; ++k) {
    CodecJob e;
    set_job(&e, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
    ASSERT_NO_FATAL_FAILURE(run(&e));
    ASSERT_EQ(e.status, Status::kOk);
    ASSERT_TRUE(e.on_gpu);
    latency += e.seconds / 6;
  }
  const double capacity = engine_->throughput(CodecJob::kEncode);
  EXPECT_GT(capacity, 1.5 * double(x.size()) / latency) << "latency " << latency * 1e3 << " ms";
  EXPECT_EQ(engine_->throughput(CodecJob::kDecode), 0) << "no decode has been measured";
}

// A job posted to the kernel waits for those posted before it: their bytes at the kernel's
// measured capacity, each kind at its own (a decode counted by the room for its output). Nothing
// queued once they are done, and nothing before a rate is measured. (No job here ran behind
// another before: no job's own time is known, so no burst's start is counted.)
TEST_F(ResidentEngineTest, QueuedSecondsAreThePostedJobsAtTheKernelsRate) {
  const Bytes x = bf16_data(1 << 20, 9);
  Bytes msg(max_compressed_bytes(x.size())), back(x.size());
  warm();
  CodecJob first;
  set_job(&first, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
  engine_->submit(&first);
  EXPECT_EQ(engine_->queued_seconds(), 0) << "no rate measured yet";
  ASSERT_NO_FATAL_FAILURE(run_to_done(&first));
  ASSERT_TRUE(first.on_gpu);
  CodecJob probe;  // a decode, for its rate
  set_job(&probe, CodecJob::kDecode, msg.data(), first.out_bytes, back.data(), back.size(), true);
  ASSERT_NO_FATAL_FAILURE(run(&probe));
  ASSERT_TRUE(probe.on_gpu);
  ASSERT_EQ(engine_->start_seconds(), 0);
  ASSERT_EQ(engine_->queued_seconds(), 0) << "all done";

  ctl_->job_wait_us = 200000;  // held in the queue while the test looks
  CodecJob e[2], d;
  for (CodecJob& j : e) set_job(&j, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
  set_job(&d, CodecJob::kDecode, msg.data(), first.out_bytes, back.data(), back.size(), true);
  for (CodecJob& j : e) engine_->submit(&j);
  engine_->submit(&d);
  const double enc = engine_->throughput(CodecJob::kEncode), dec = engine_->throughput(CodecJob::kDecode);
  const double queued = engine_->queued_seconds();
  ASSERT_FALSE(e[0].done()) << "the test was too slow to look";
  EXPECT_DOUBLE_EQ(queued, 2 * double(x.size()) / enc + double(back.size()) / dec);
  for (CodecJob& j : e) ASSERT_NO_FATAL_FAILURE(run_to_done(&j));
  ASSERT_NO_FATAL_FAILURE(run_to_done(&d));
  EXPECT_EQ(engine_->queued_seconds(), engine_->start_seconds());
}

// A burst's start: its first job (the first a launch of the kernel takes) measured against the
// own time per byte (first tile to result, on the kernel's clock) of jobs that ran behind another,
// each burst moving the average a quarter of the way. A launch's burst begins when the link first
// asks (queued_seconds(), as the policy does for each message); until that average has passed
// since, what is left of it is queued too.
TEST_F(ResidentEngineTest, ABurstsStartIsItsFirstJobsExtraTime) {
  make(20000);  // the kernel exits 20 ms after a burst, as between collectives
  const Bytes x = bf16_data(256 << 10, 3);
  Bytes msg(max_compressed_bytes(x.size()));
  auto stopped = [&] {
    const auto end = Clock::now() + std::chrono::seconds(5);
    while (gpu_->state() != ResidentCodec::kStopped) {
      ASSERT_LT(Clock::now(), end) << "the kernel did not exit";
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };
  // A job's own seconds: first tile to result, on the kernel's clock.
  auto own_seconds = [](const CodecJob& j, double* own) {
    ASSERT_GE(j.gpu_times.end, j.gpu_times.start);
    *own = double(j.gpu_times.end - j.gpu_times.start) * 1e-9;
  };
  // A burst of n jobs on a kernel started for it, each asked about first; their seconds from post
  // to result, and their own seconds.
  std::vector<double> own;
  auto burst = [&](int n, std::vector<double>* seconds) {
    ASSERT_NO_FATAL_FAILURE(stopped());
    ASSERT_NO_FATAL_FAILURE(warm());
    std::vector<CodecJob> jobs(n);
    for (CodecJob& j : jobs) {
      set_job(&j, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
      engine_->queued_seconds();
      engine_->submit(&j);
    }
    seconds->clear();
    own.clear();
    for (CodecJob& j : jobs) {
      ASSERT_NO_FATAL_FAILURE(run_to_done(&j));
      ASSERT_TRUE(j.on_gpu);
      seconds->push_back(j.seconds);
      own.emplace_back();
      ASSERT_NO_FATAL_FAILURE(own_seconds(j, &own.back()));
    }
  };
  std::vector<double> s;
  ASSERT_NO_FATAL_FAILURE(burst(2, &s));  // the second job's own time: the measure
  EXPECT_EQ(engine_->start_seconds(), 0) << "the first burst had no measure yet";
  EXPECT_EQ(engine_->queued_seconds(), 0) << "nothing to wait for";
  const double measure = own[1];  // a loaded machine may stretch it: the bounds below use it

  ctl_->job_wait_us = 50000;  // time a job spends before the kernel takes it, not its own
  ASSERT_NO_FATAL_FAILURE(burst(1, &s));
  const double first = engine_->start_seconds();
  ASSERT_GE(s[0], 0.05) << "the wait is in the job's time";
  EXPECT_NEAR(first, s[0] - measure, 1e-9) << "the first sample is taken as it is";
  ASSERT_TRUE(gpu_->acquire()) << "the kernel exited within 20 ms";  // the same launch from here
  CodecJob more;  // this launch's burst is over: nothing but its queue waited for
  set_job(&more, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
  EXPECT_EQ(engine_->queued_seconds(), 0);
  ASSERT_NO_FATAL_FAILURE(run(&more));
  gpu_->release();
  EXPECT_EQ(engine_->start_seconds(), first) << "a job that began no burst is not measured";
  double more_own = 0;
  ASSERT_NO_FATAL_FAILURE(own_seconds(more, &more_own));

  ASSERT_NO_FATAL_FAILURE(burst(2, &s));  // the second's wait is not its own time
  ASSERT_GE(s[1], 0.095) << "the second waited for the first and its own wait";
  // The first job's extra time: its seconds less the average own time, which lies between the two
  // measured so far (the first burst's second job and `more`).
  const double lo = first + (s[0] - std::max(measure, more_own) - first) / 4;
  const double hi = first + (s[0] - std::min(measure, more_own) - first) / 4;
  EXPECT_GE(engine_->start_seconds(), lo - 1e-9);
  EXPECT_LE(engine_->start_seconds(), hi + 1e-9);

  ASSERT_NO_FATAL_FAILURE(stopped());
  EXPECT_EQ(engine_->queued_seconds(), 0) << "a stopped kernel: its start is waited for first";
  ASSERT_NO_FATAL_FAILURE(warm());
  const double start = engine_->start_seconds();
  CodecJob held;  // the burst begins at the first question; the job behind it waits what is left
  set_job(&held, CodecJob::kEncode, x.data(), x.size(), msg.data(), msg.size(), true);
  ctl_->job_wait_us = 200000;
  const auto t0 = Clock::now();
  const double asked = engine_->queued_seconds();
  engine_->submit(&held);
  const double at = engine_->queued_seconds();
  const double since = std::chrono::duration<double>(Clock::now() - t0).count();
  const double bytes_s = double(x.size()) / engine_->throughput(CodecJob::kEncode);
  EXPECT_LE(asked, start);
  EXPECT_GE(asked, start - since);
  EXPECT_LE(at, bytes_s + start);
  EXPECT_GE(at, bytes_s + start - since);
  std::this_thread::sleep_for(std::chrono::duration<double>(start + 0.002));
  ASSERT_FALSE(held.done()) << "the test was too slow to look";
  EXPECT_DOUBLE_EQ(engine_->queued_seconds(), bytes_s) << "the burst's start is behind it";
  ASSERT_NO_FATAL_FAILURE(run_to_done(&held));

  ctl_->job_wait_us = 0;
  ASSERT_NO_FATAL_FAILURE(stopped());
  ASSERT_NO_FATAL_FAILURE(warm());
  ASSERT_TRUE(gpu_->acquire()) << "the kernel exited within 20 ms";  // held while nothing is coded
  EXPECT_GT(engine_->queued_seconds(), 0) << "a new launch's burst begins";
  std::this_thread::sleep_for(std::chrono::duration<double>(engine_->start_seconds() + 0.002));
  EXPECT_EQ(engine_->queued_seconds(), 0) << "and runs down though nothing was coded (its messages went raw)";
  gpu_->release();

  const double before = engine_->start_seconds();  // bursts that start at once bring it down
  for (int k = 0; k < 8; ++k) ASSERT_NO_FATAL_FAILURE(burst(1, &s));
  EXPECT_LT(engine_->start_seconds(), before * 0.75 * 0.75) << "eight bursts without a wait";
}

}  // namespace
}  // namespace zipccl
