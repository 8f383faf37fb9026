// What the resident codec takes from the application's kernels, in one process (no MPS, as on a
// real node): a loop of bf16 GEMMs (cuBLAS, 8192^3) timed alone and then beside the plugin's
// resident codec (engine/resident_codec.h over the real device side, packed on an SM partition
// or spread as NCCL_ZIP_GPU_CTAS_PER_SM says) coding a paced stream of 512 KiB bf16 jobs in
// pinned host memory, encodes and decodes in turn, as a link's traffic would give it. The
// slowdown (beside / alone, median of rounds) is the codec's share of the SMs and memory; NCCL's
// own kernels are not in it (bench/nccl/gemm_beside.py has them, under MPS). Its floor, in the
// same rounds: the GEMMs beside the kernel resident under a lease but given no jobs (the SMs it
// holds, no coding).
// Usage: gpu_beside_bench [--ctas=10] [--rate=11.4 (GB/s of input, encodes and decodes
//        together; 11.4: a 4 GB/s link both ways at ratio 0.7)] [--dim=8192] [--gemms=N (default
//        ~2.1 s of work: 40 at 8192, scaled by (8192 / dim)^3)] [--rounds=3]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "engine_params.h"
#include "resident_codec.h"
#include "service_data.h"
#include "zipccl/codec.h"

using namespace zipccl;
using namespace zipccl::bench;

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kJob = 512 << 10;
constexpr int kInflight = 32;

#define CB(x)                                                               \
  do {                                                                      \
    cublasStatus_t s_ = (x);                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                      \
      fprintf(stderr, "%s:%d %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, int(s_)); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

// Jobs posted every kJob / rate seconds under one lease, at most kInflight out; every result
// checked for status and size.
class Feeder {
 public:
  Feeder(std::shared_ptr<ResidentCodec> codec, double rate) : codec_(std::move(codec)), rate_(rate) {}
  void start() {
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }
  // Stops posting, waits for the jobs out, releases the lease; input GB/s coded while it ran.
  double stop() {
    stop_ = true;
    thread_.join();
    return achieved_;
  }

 private:
  void run() {
    while (!codec_->acquire()) std::this_thread::sleep_for(std::chrono::microseconds(20));
    const auto t0 = Clock::now();
    const double gap_s = double(kJob) / (rate_ * 1e9);
    std::vector<uint64_t> out;
    uint64_t posted = 0, done = 0;
    while (!stop_ || !out.empty()) {
      const double now_s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!stop_ && rate_ > 0 && out.size() < kInflight && now_s >= double(posted) * gap_s) {
        uint8_t* const dst = staging_.p + size_t(posted % kInflight) * max_compressed_bytes(kJob);
        const gpu::ServiceJob j = posted % 2 == 0 ? job(kEncode, data_.src.p, kJob, dst, kJob, data_.src.host)
                                                  : job(kDecode, data_.msg.p, data_.msg_bytes, dst, kJob, data_.msg.host);
        uint64_t i = 0;
        if (codec_->post(j, &i)) {
          out.push_back(i);
          ++posted;
        }
        continue;
      }
      gpu::Result r{};
      if (!out.empty() && codec_->poll(out.front(), &r)) {
        if (r.status != int(Status::kOk) || r.bytes == 0) {
          fprintf(stderr, "job %llu: status %d, %llu bytes\n", (unsigned long long)out.front(), r.status,
                  (unsigned long long)r.bytes);
          exit(1);
        }
        out.erase(out.begin());
        ++done;
      }
    }
    achieved_ = double(done) * kJob / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
    codec_->release();
  }

  std::shared_ptr<ResidentCodec> codec_;
  const double rate_;
  // The input and its message, in pinned host memory as NCCL's buffers and the staging are.
  const Data data_{gaussian(Codec::BF16, kJob, 1, 0.02f).data(), kJob, true};
  Buf staging_{kInflight * max_compressed_bytes(kJob), true};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  double achieved_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (!have_cuda_device("gpu_beside_bench")) return 0;
  int ctas = 10, gemms = 0, dim = 8192, rounds = 3;
  double rate = 11.4;
  for (int i = 1; i < argc; ++i) {
    if (!strncmp(argv[i], "--ctas=", 7))
      ctas = atoi(argv[i] + 7);
    else if (!strncmp(argv[i], "--rate=", 7))
      rate = atof(argv[i] + 7);
    else if (!strncmp(argv[i], "--gemms=", 8))
      gemms = atoi(argv[i] + 8);
    else if (!strncmp(argv[i], "--dim=", 6))
      dim = atoi(argv[i] + 6);
    else if (!strncmp(argv[i], "--rounds=", 9))
      rounds = atoi(argv[i] + 9);
    else
      return fprintf(stderr, "unknown argument %s\n", argv[i]), 2;
  }
  if (gemms <= 0) gemms = std::max(1, int(40 * std::pow(8192.0 / dim, 3) + 0.5));
  CK(cudaSetDevice(0));
  // The GEMMs' memory first: cudaFree and cudaMalloc wait for a running resident kernel.
  const size_t mat = size_t(dim) * dim * 2;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CK(cudaMalloc(&a, mat));
  CK(cudaMalloc(&b, mat));
  CK(cudaMalloc(&c, mat));
  CK(cudaMemset(a, 0x3c, mat));
  CK(cudaMemset(b, 0x3c, mat));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  CB(cublasCreate(&h));
  CB(cublasSetStream(h, s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const float alpha = 1, beta = 0;
  auto gemm_ms = [&](int count) {
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < count; ++i)
      CB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &alpha, a, CUDA_R_16BF, dim, b, CUDA_R_16BF, dim,
                      &beta, c, CUDA_R_16BF, dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return double(ms);
  };

  std::string err;
  auto dev = make_cuda_service_device(0, ctas, &err);
  if (!dev) return fprintf(stderr, "the resident codec's device side: %s\n", err.c_str()), 1;
  const std::string where = dev->placement();
  ResidentCodec::Options o;
  o.ctas = dev->launch_ctas(ctas);
  auto codec = ResidentCodec::create(std::move(dev), o);
  {
    Feeder feeder(codec, rate), idle(codec, 0);
    gemm_ms(5);  // cuBLAS's first calls (its workspace, the kernel's load) are not timed
    std::vector<double> alone, resident, beside, achieved;
    const auto timed_beside = [&](Feeder& f, std::vector<double>* ms) {
      f.start();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the kernel started, the stream steady
      ms->push_back(gemm_ms(gemms));
      return f.stop();
    };
    for (int r = 0; r < rounds; ++r) {
      alone.push_back(gemm_ms(gemms));
      timed_beside(idle, &resident);
      achieved.push_back(timed_beside(feeder, &beside));
    }
    printf("BESIDE ctas=%d launched=%d per_sm=%lld placement=\"%s\" rate_gbps=%.1f achieved_gbps=%.1f dim=%d gemms=%d "
           "alone_ms=%.2f resident_idle_ms=%.2f beside_ms=%.2f slowdown_idle=%.3f slowdown=%.3f\n",
           ctas, o.ctas, (long long)gpu_ctas_per_sm(), where.c_str(), rate, median(achieved), dim, gemms, median(alone),
           median(resident), median(beside), median(resident) / median(alone), median(beside) / median(alone));
  }
  if (!codec->shutdown()) fprintf(stderr, "the resident kernel did not stop\n");
  cublasDestroy(h);
  cudaStreamDestroy(s);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 0;
}
