// ResidentCodec over the real kernel, and the situations that hang a plugin making CUDA calls
// from NCCL's threads: a foreign kernel spinning until our job is done (NCCL's kernels wait for
// the network), an application thread inside cudaDeviceSynchronize or cudaFree while leases come
// and go; where its CTAs run. Also run under CUDA_DEVICE_MAX_CONNECTIONS=1 and with CTAs spread
// one to an SM (NCCL_ZIP_GPU_CTAS_PER_SM=1, CMakeLists.txt). Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bf16_data.h"
#include "engine_params.h"
#include "resident_codec.h"
#include "sm_partition.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace {

using Clock = std::chrono::steady_clock;

// Stands for NCCL's kernel: spins until the host sets *flag (mapped memory).
__global__ void spin_until(const volatile uint32_t* flag) {
  while (*flag == 0) __nanosleep(1000);
}

// A buffer in mapped pinned memory, allocated before any kernel of ours runs.
struct Pinned {
  uint8_t* p = nullptr;
  explicit Pinned(size_t n) { cudaHostAlloc(reinterpret_cast<void**>(&p), n ? n : 1, cudaHostAllocMapped); }
  ~Pinned() { cudaFreeHost(p); }
};

class ResidentCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    cudaSetDevice(0);
    std::string err;
    auto dev = make_cuda_service_device(0, 16, &err);
    ASSERT_TRUE(dev) << err;
    ResidentCodec::Options o;
    o.ctas = 16;
    o.idle_us = 500;
    codec_ = ResidentCodec::create(std::move(dev), o);
  }
  void TearDown() override {
    if (codec_) {
      EXPECT_TRUE(codec_->shutdown());
    }
  }
  bool lease(std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (!codec_->acquire())
      if (Clock::now() > end) return false;
    return true;
  }
  // Encodes n bytes of `in` into `out` under a held lease and checks them against the CPU codec.
  void encode_checked(const uint8_t* in, size_t n, uint8_t* out) {
    gpu::ServiceJob j{};
    j.op = gpu::kServiceEncode;
    j.in = in;
    j.in_bytes = n;
    j.out = out;
    j.out_cap = max_compressed_bytes(n);
    j.limit = coded_limit(n, 1.0);
    j.codec = uint8_t(Codec::BF16);
    uint64_t i = 0;
    ASSERT_TRUE(codec_->post(j, &i));
    gpu::Result r{};
    const auto end = Clock::now() + std::chrono::seconds(5);
    while (!codec_->poll(i, &r)) ASSERT_LT(Clock::now(), end) << "job never finished";
    std::vector<uint8_t> ref(max_compressed_bytes(n));
    size_t len = 0;
    ASSERT_EQ(encode(Codec::BF16, in, n, ref.data(), ref.size(), &len), Status::kOk);
    ASSERT_EQ(r.status, int(Status::kOk));
    ASSERT_EQ(r.bytes, len);
    ASSERT_EQ(0, std::memcmp(out, ref.data(), len));
  }
  static void fill(uint8_t* p, size_t n, uint32_t seed) {
    const std::vector<uint8_t> b = enginetest::bf16_data(n, seed);
    std::memcpy(p, b.data(), n);
  }

  std::shared_ptr<ResidentCodec> codec_;
};

TEST_F(ResidentCuda, CodesAndExitsWhenIdle) {
  constexpr size_t kN = 512 << 10;
  Pinned in(kN), out(max_compressed_bytes(kN));
  fill(in.p, kN, 1);
  ASSERT_TRUE(lease(std::chrono::seconds(5)));
  for (int k = 0; k < 20; ++k) ASSERT_NO_FATAL_FAILURE(encode_checked(in.p, kN - 2 * k, out.p));
  codec_->release();
  const auto end = Clock::now() + std::chrono::seconds(1);
  while (codec_->state() != ResidentCodec::kStopped) ASSERT_LT(Clock::now(), end) << "still resident when idle";
}

// A foreign kernel spins until our job is done, as NCCL's waits for the network: our kernel must
// start beside it promptly (loaded and launched once at init, not lazily at its first launch,
// which would wait for the spinning one), and the job must finish.
TEST_F(ResidentCuda, RunsBesideASpinningKernel) {
  constexpr size_t kN = 256 << 10;
  Pinned in(kN), out(max_compressed_bytes(kN)), flag(4);
  fill(in.p, kN, 2);
  std::memset(flag.p, 0, 4);
  uint32_t* dflag = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag.p, 0), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  spin_until<<<1, 32, 0, s>>>(dflag);
  const auto t0 = Clock::now();
  const bool leased = lease(std::chrono::seconds(10));
  const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
  RecordProperty("lease_us", int(waited));
  // Beside, not after a time slice of the other kernel's context (under MPS, a launch into an SM
  // partition waited tens of milliseconds; NCCL's kernels spin for whole collectives).
  EXPECT_LT(waited, 100000) << "the kernel started only after " << waited << " us";
  if (leased) {
    EXPECT_NO_FATAL_FAILURE(encode_checked(in.p, kN, out.p));
    codec_->release();
  }
  __atomic_store_n(reinterpret_cast<uint32_t*>(flag.p), 1u, __ATOMIC_RELEASE);  // always let it go
  EXPECT_TRUE(leased) << "no lease while a foreign kernel spins";
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

// An application thread in cudaDeviceSynchronize / cudaFree while another codes bursts with
// gaps: the application's call returns once the bursts end (the kernel exits when idle), and
// every burst is served or refused at once, never held by the application's call.
TEST_F(ResidentCuda, SynchronizeAndFreeReturnWhileBurstsComeAndGo) {
  constexpr size_t kN = 128 << 10;
  Pinned in(kN), out(max_compressed_bytes(kN));
  fill(in.p, kN, 3);
  void* victim = nullptr;
  ASSERT_EQ(cudaMalloc(&victim, 1 << 20), cudaSuccess);
  std::atomic<bool> bursts_done{false};
  std::atomic<int> coded{0}, refused{0};
  int64_t worst_acquire_ns = 0;
  std::thread bursts([&] {
    std::mt19937 g(4);
    const auto end = Clock::now() + std::chrono::milliseconds(300);
    while (Clock::now() < end) {
      const auto t0 = Clock::now();
      const bool ok = codec_->acquire();
      worst_acquire_ns = std::max<int64_t>(worst_acquire_ns, std::chrono::nanoseconds(Clock::now() - t0).count());
      if (ok) {
        encode_checked(in.p, kN, out.p);
        codec_->release();
        coded++;
      } else {
        refused++;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(g() % 1500));  // gaps around the idle time
    }
    bursts_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = Clock::now();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaFree(victim), cudaSuccess);
  const auto took = Clock::now() - t0;
  bursts.join();
  EXPECT_LT(took, std::chrono::seconds(2)) << "the application's calls waited for our kernel";
  EXPECT_LT(worst_acquire_ns, 50000000) << "an acquire waited";
  EXPECT_GT(coded.load(), 10);
  RecordProperty("coded", coded.load());
  RecordProperty("refused", refused.load());
}

// The device's trial launch at its making tells where the CTAs ran: packed two to an SM on an SM
// partition of half as many SMs by default (CTAs added to fill the SMs the split gives), one to
// an SM with NCCL_ZIP_GPU_CTAS_PER_SM=1 or under MPS (the GPU otherwise idle: nothing else holds
// its SMs).
TEST(ResidentCudaPlacement, CtasShareSmsAsAsked) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  cudaSetDevice(0);
  for (int ctas : {1, 8, 10}) {
    std::string err;
    auto dev = make_cuda_service_device(0, ctas, &err);
    ASSERT_TRUE(dev) << err;
    const int launched = dev->launch_ctas(ctas);
    const int sms = gpu::service_sms(dev->host(), launched);
    int mps = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0), cudaSuccess);
    if (gpu_ctas_per_sm() == 1 || mps) {
      EXPECT_EQ(launched, ctas);
      EXPECT_EQ(sms, ctas) << dev->placement();
      const char* why = mps && gpu_ctas_per_sm() > 1 ? "no SM partition: MPS" : "no SM partition: NCCL_ZIP_GPU_CTAS_PER_SM=1";
      EXPECT_NE(dev->placement().find(why), std::string::npos) << dev->placement();
    } else {
      // The partition has at least the SMs asked for, more where the driver's split is coarser.
      const std::string where = dev->placement();
      const size_t at = where.find("(an SM partition of ");
      ASSERT_NE(at, std::string::npos) << where;
      const int part = std::atoi(where.c_str() + at + 20);
      EXPECT_GE(part, partition_sms(ctas, int(gpu_ctas_per_sm()))) << where;
      // The kernel fills the SMs held: 10 CTAs asked, 6 SMs given, 12 launched on all 6.
      EXPECT_EQ(launched, std::max(ctas, part * int(gpu_ctas_per_sm()))) << where;
      EXPECT_EQ(sms, part) << launched << " CTAs " << where;
    }
  }
}

}  // namespace
}  // namespace zipccl
