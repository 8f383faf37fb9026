// Resident codec benchmark (zipccl/gpu_service.h), driven as the plugin drives it: jobs posted in
// mapped memory, results polled in memory. Beside every coded row, in the same launch, its
// floor: a Raw encode, the same kernel, tiles and completion moving the same bytes without
// coding.
//  - latency: one job at a time on an idle kernel, from the doorbell store until the result is
//    visible to the host (median and p90), and where that time goes, bf16 Gaussian data in
//    device memory;
//  - sustained: 512 KiB jobs (--job-kib), 32 in flight (--inflight, at most kServiceRing; past 32
//    in-flight jobs share the 32 buffer sets, writing the same bytes), input GB/s from device
//    buffers and from pinned host buffers (output in the same kind of memory, as the plugin's
//    staging is), and beside it the capacity the plugin would measure from the same run
//    (ServiceHost::tile_ns).
// Buffers are allocated before the kernel starts and freed after it exits (cudaFree waits for a
// running kernel).
// CTAs are packed two to an SM on an SM partition (engine/sm_partition.h) as the plugin packs
// them; --per-sm=1 spreads them one to an SM.
// --only=OP:MEM (OP floor, encode or decode; MEM device or host) runs that sustained row alone and
// no latency table, so that a trace build's per-phase cycles (-DZIPCCL_GPU_TRACE=ON, printed
// after each CTA count) are that row's.
// --beside-d2h=MiB: the latency of one 1 MiB job in pinned host memory alone and while a copy
// engine moves MiB from device to pinned host memory without pause, as NCCL copies a
// collective's first chunks to its host buffers while the plugin codes the first message;
// with --beside-stores=N, N CTAs of a kernel move them with SM stores, as NCCL's kernels do.
// --one-buffer: launches give each CTA one tile buffer where they could give two (a CTA stages
// its next encode tile in the second while it codes one; gpu::service_load()), as on sm_86/89.
// Usage: gpu_service_bench [--quick] [--per-sm=1|2] [--only=OP:MEM] [--inflight=N] [--job-kib=K]
//                          [--beside-d2h=MiB [--beside-stores=N]] [--one-buffer] [CTAS...]
//                          (default CTA counts: 8 16 32)
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "host_store_load.h"
#include "service_data.h"
#include "sm_partition.h"
#include "zipccl/codec.h"
#include "zipccl/gpu_service.h"

using namespace zipccl;
using namespace zipccl::bench;

namespace {

using Clock = std::chrono::steady_clock;

class Service {
 public:
  Service() {
    CK(cudaHostAlloc(reinterpret_cast<void**>(&h_), sizeof(gpu::ServiceHost), cudaHostAllocMapped));
    memset(h_, 0, sizeof *h_);
    CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dh_), h_, 0));
    CK(cudaMalloc(&dev_, gpu::service_device_bytes()));
    CK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    CK(gpu::service_init(dev_, s_));
    CK(cudaStreamSynchronize(s_));
    CK(gpu::service_load(&staging_));
  }
  bool staging() const { return staging_; }
  void one_buffer() { staging_ = false; }
  // On `stream`, or the service's own where null; us from the launch call to the kernel running.
  double start(int ctas, cudaStream_t stream) {
    h_->stop = 0;
    launched_on_ = stream ? stream : s_;
    const auto t0 = Clock::now();
    CK(gpu::service_launch(dh_, dev_, ctas, ++gen_, staging_, launched_on_));
    while (!gpu::service_started(h_, gen_)) {
    }
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  void stop() {
    gpu::service_stop(h_, tail_);
    while (!gpu::service_exited(h_, gen_)) {
    }
    CK(cudaStreamSynchronize(launched_on_));
  }
  // How many SMs the last launch's CTAs ran on.
  int sms(int ctas) const { return gpu::service_sms(h_, ctas); }
  uint64_t post(const gpu::ServiceJob& j) {
    gpu::service_post(h_, tail_, j);
    return tail_++;
  }
  gpu::Result wait(uint64_t i, gpu::JobTimes* times = nullptr) const {
    gpu::Result r;
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (!gpu::service_poll(h_, i, &r, times))
      if (Clock::now() > end) {
        fprintf(stderr, "job %llu never completed\n", static_cast<unsigned long long>(i));
        exit(1);
      }
    if (r.status != int(Status::kOk)) {
      fprintf(stderr, "job %llu: status %d\n", static_cast<unsigned long long>(i), r.status);
      exit(1);
    }
    return r;
  }
  // The running kernel's CTAs' time in tiles of op (0 encode, 1 decode) so far.
  uint64_t tile_ns(int ctas, int op) const { return gpu::service_tile_ns(h_, ctas, op); }

 private:
  gpu::ServiceHost* h_ = nullptr;
  gpu::ServiceHost* dh_ = nullptr;
  void* dev_ = nullptr;
  cudaStream_t s_ = nullptr, launched_on_ = nullptr;
  uint32_t gen_ = 0;
  uint64_t tail_ = 0;
  bool staging_ = false;
};

const char* const kOpName[] = {"floor (Raw)", "encode bf16", "decode bf16"};  // by Op

using DataSet = std::vector<std::unique_ptr<Data>>;

// One job at a time on an idle kernel: j's median and p90 us from the doorbell to its result; on
// the GPU's clock, the medians from the job's take to its first tile's start (posting it, and
// the CTAs finding its tickets) and from there to its result (tiles); and the rest of the
// doorbell-to-result time (the poll finding the doorbell, reading the job, the host seeing the
// result).
struct Latency {
  double median, p90, tiles, dispatch, rest;
};
Latency job_latency(Service& sv, const gpu::ServiceJob& j, int reps) {
  std::vector<double> t, tiles, dispatch, rest;
  for (int r = 0; r < reps + 10; ++r) {
    const auto idle = Clock::now() + std::chrono::microseconds(20);  // the kernel back to polling
    while (Clock::now() < idle) {
    }
    const auto t0 = Clock::now();
    gpu::JobTimes times;
    sv.wait(sv.post(j), &times);
    if (r < 10) continue;
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    tiles.push_back(double(times.end - times.start) / 1e3);
    dispatch.push_back(double(times.start - times.taken) / 1e3);
    rest.push_back(t.back() - double(times.end - times.taken) / 1e3);
  }
  return {median(t), pct(t, 0.9), median(tiles), median(dispatch), median(rest)};
}

void latency(Service& sv, DataSet& ds, int reps) {
  printf("| bytes | op | median us | p90 us | median - floor us | take -> tile / tiles / rest us |\n"
         "|---|---|---|---|---|---|\n");
  for (auto& d : ds) {
    const size_t n = d->n;
    double floor_us = 0;
    for (Op op : {kFloor, kEncode, kDecode}) {
      const Latency l = job_latency(sv, d->for_op(op), reps);
      if (op == kFloor) floor_us = l.median;
      printf("| %zu KiB | %s | %.2f | %.2f | %+.2f | %.2f / %.2f / %.2f |\n", n >> 10, kOpName[op], l.median, l.p90,
             l.median - floor_us, l.dispatch, l.tiles, l.rest);
    }
  }
}

// Device-to-host traffic on a stream of its own from start() to stop(): back-to-back copies by a
// copy engine, or (store_ctas > 0) a kernel of that many CTAs storing into mapped host memory,
// as NCCL's kernels fill their host buffers. Its buffers come and go while no resident kernel
// runs (cudaFree would wait for it).
class D2hLoad {
 public:
  D2hLoad(size_t bytes, int store_ctas) : n_(bytes), ctas_(store_ctas) {
    CK(cudaMalloc(&dev_, n_));
    CK(cudaHostAlloc(&host_, n_, cudaHostAllocMapped));
    CK(cudaHostAlloc(reinterpret_cast<void**>(&ctl_), sizeof(uint64_t) * (1 + std::max(ctas_, 1)), cudaHostAllocMapped));
    CK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    if (ctas_) CK(load_host_store_kernel());
  }
  ~D2hLoad() {
    CK(cudaStreamDestroy(s_));
    CK(cudaFreeHost(ctl_));
    CK(cudaFreeHost(host_));
    CK(cudaFree(dev_));
  }
  const char* what() const { return ctas_ ? "SM stores" : "copies"; }
  void start() {
    t0_ = Clock::now();
    if (ctas_) {
      memset(ctl_, 0, sizeof(uint64_t) * (1 + ctas_));
      void *dhost = nullptr, *dctl = nullptr;
      CK(cudaHostGetDevicePointer(&dhost, host_, 0));
      CK(cudaHostGetDevicePointer(&dctl, ctl_, 0));
      CK(launch_host_store_load(dev_, dhost, n_, ctas_, static_cast<const uint32_t*>(dctl),
                                static_cast<unsigned long long*>(dctl) + 1, s_));
      return;
    }
    stop_ = false;
    copies_ = 0;
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        CK(cudaMemcpyAsync(host_, dev_, n_, cudaMemcpyDeviceToHost, s_));
        CK(cudaStreamSynchronize(s_));
        copies_.fetch_add(1);
      }
    });
  }
  double stop() {  // GB/s moved
    double bytes = 0;
    if (ctas_) {
      __atomic_store_n(reinterpret_cast<uint32_t*>(ctl_), 1u, __ATOMIC_RELEASE);
      CK(cudaStreamSynchronize(s_));
      for (int c = 0; c < ctas_; ++c) bytes += double(ctl_[1 + c]);
    } else {
      stop_ = true;
      thread_.join();
      bytes = double(copies_.load()) * double(n_);
    }
    return bytes / std::chrono::duration<double>(Clock::now() - t0_).count() / 1e9;
  }

 private:
  size_t n_;
  int ctas_;
  void* dev_ = nullptr;
  void* host_ = nullptr;
  uint64_t* ctl_ = nullptr;  // the stop flag, then each CTA's bytes
  cudaStream_t s_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> copies_{0};
  Clock::time_point t0_;
};

void latency_beside_d2h(Service& sv, Data& d, D2hLoad& load, int reps) {
  printf("| %zu KiB, pinned host | op | alone median / p90 us (tiles) | beside the %s median / p90 us (tiles) | "
         "%s GB/s |\n|---|---|---|---|---|\n", size_t(d.n >> 10), load.what(), load.what());
  for (Op op : {kFloor, kEncode, kDecode}) {
    const gpu::ServiceJob j = d.for_op(op);
    const Latency alone = job_latency(sv, j, reps);
    load.start();
    const Latency beside = job_latency(sv, j, reps);
    const double gbs = load.stop();
    printf("| | %s | %.2f / %.2f (%.2f) | %.2f / %.2f (%.2f) | %.1f |\n", kOpName[op], alone.median, alone.p90,
           alone.tiles, beside.median, beside.p90, beside.tiles, gbs);
  }
}

constexpr int kDataSets = 32;

struct Load {
  size_t job = size_t(512) << 10;
  int inflight = 32;
};

// Also the capacity the plugin measures (ResidentEngine::throughput): the same bytes over the CTAs'
// time in tiles, shared among them; with the kernel kept busy it should come out near the rate.
// only_op / only_host: the one row to run (-1: all).
void sustained(Service& sv, DataSet (&sets)[2], const Load& load, int jobs, int ctas, int only_op, int only_host) {
  printf("sustained: %zu KiB jobs, %d in flight\n\n", load.job >> 10, load.inflight);
  printf("| buffers | op | input GB/s | of floor | capacity by tile time GB/s |\n|---|---|---|---|---|\n");
  for (bool host : {false, true}) {
    if (only_host >= 0 && int(host) != only_host) continue;
    DataSet& d = sets[host];
    double floor_gbs = 0;
    for (Op op : {kFloor, kEncode, kDecode}) {
      if (only_op >= 0 && int(op) != only_op) continue;
      std::vector<gpu::ServiceJob> js;
      for (auto& e : d) js.push_back(e->for_op(op));
      std::vector<double> gbs;
      const int tile_op = op == kDecode ? 1 : 0;
      const uint64_t tile0 = sv.tile_ns(ctas, tile_op);
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<uint64_t> idx;
        const auto t0 = Clock::now();
        for (int i = 0; i < jobs; ++i) {
          if (i >= load.inflight) sv.wait(idx[size_t(i - load.inflight)]);
          idx.push_back(sv.post(js[size_t(i % kDataSets)]));
        }
        for (int i = jobs - load.inflight; i < jobs; ++i) sv.wait(idx[size_t(i)]);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        gbs.push_back(double(jobs) * double(load.job) / s / 1e9);
      }
      const double m = median(gbs);
      if (op == kFloor) floor_gbs = m;
      const double busy_s = double(sv.tile_ns(ctas, tile_op) - tile0) * 1e-9 / ctas;
      const double capacity = busy_s > 0 ? 3.0 * jobs * double(load.job) / busy_s / 1e9 : 0;
      char of_floor[16] = "-";
      if (floor_gbs > 0) snprintf(of_floor, sizeof of_floor, "%.2f", m / floor_gbs);
      printf("| %s | %s | %.1f | %s | %.1f |\n", host ? "pinned host" : "device", kOpName[op], m, of_floor, capacity);
    }
  }
}

#ifdef ZIPCCL_GPU_TRACE
// Where a CTA's time went over the launch (per tile, thread 0's cycles), and the phases of each
// CTA's last tile (zipccl/gpu_service.h's read_service_trace()); encode: a run of encodes alone,
// whose last tiles also hold the encode tile's own marks.
void print_trace(int ctas, bool encode) {
  static unsigned long long tr[gpu::kTraceTiles][gpu::kTraceSlots];
  CK(gpu::read_service_trace(tr));
  double sum[5] = {}, last[4] = {};
  for (int c = 0; c < ctas; ++c) {
    for (int i = 0; i < 5; ++i) sum[i] += double(tr[c][11 + i]);
    const int marks[5] = {0, 1, 8, 9, 10};
    for (int i = 0; i < 4; ++i) last[i] += double(tr[c][marks[i + 1]] - tr[c][marks[i]]) / ctas;
  }
  printf("\ntrace: %.0f tiles; cycles per tile: ticket wait %.0f, slot lookup %.0f, tile %.0f, release %.0f\n",
         sum[0], sum[1] / sum[0], sum[2] / sum[0], sum[3] / sum[0], sum[4] / sum[0]);
  printf("trace: last tile per CTA, mean cycles: start->plan %.0f, plan->coded %.0f, coded->counted %.0f, "
         "counted->end %.0f\n", last[0], last[1], last[2], last[3]);
  if (!encode) return;
  // plan->coded split at the encode tile's marks (encode_tile.cuh: slots 2-7 of the last tile,
  // then 8, coded), each from the mark before it.
  printf("trace: last tile per CTA, mean cycles from the mark before:");
  for (int m = 2; m <= 8; ++m) {
    double d = 0;
    for (int c = 0; c < ctas; ++c) d += double(int64_t(tr[c][m] - tr[c][m - 1])) / ctas;
    printf(" %d %.0f", m, d);
  }
  printf("\n");
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (!have_cuda_device("gpu_service_bench")) return 0;
  bool quick = false, one_buffer = false;
  int per_sm = 2, only_op = -1, only_host = -1, beside_mib = 0, beside_stores = 0;
  Load load;
  std::vector<int> ctas;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!strcmp(argv[i], "--one-buffer")) {
      one_buffer = true;
    } else if (!strncmp(argv[i], "--per-sm=", 9)) {
      per_sm = atoi(argv[i] + 9);
    } else if (!strncmp(argv[i], "--inflight=", 11)) {
      load.inflight = atoi(argv[i] + 11);
    } else if (!strncmp(argv[i], "--job-kib=", 10)) {
      load.job = size_t(atoi(argv[i] + 10)) << 10;
    } else if (!strncmp(argv[i], "--beside-d2h=", 13)) {
      beside_mib = atoi(argv[i] + 13);
    } else if (!strncmp(argv[i], "--beside-stores=", 16)) {
      beside_stores = atoi(argv[i] + 16);
    } else if (!strncmp(argv[i], "--only=", 7)) {
      const std::string v = argv[i] + 7;
      const size_t colon = v.find(':');
      const std::string op = v.substr(0, colon), mem = colon == std::string::npos ? "" : v.substr(colon + 1);
      only_op = op == "floor" ? kFloor : op == "encode" ? kEncode : op == "decode" ? kDecode : -1;
      only_host = mem == "device" ? 0 : mem == "host" ? 1 : -1;
      if (only_op < 0 || only_host < 0) {
        fprintf(stderr, "--only=OP:MEM: OP floor, encode or decode; MEM device or host (got %s)\n", v.c_str());
        return 2;
      }
    } else {
      ctas.push_back(atoi(argv[i]));
    }
  }
  if (ctas.empty()) ctas = {8, 16, 32};
  if (load.inflight < 1 || load.inflight > int(gpu::kServiceRing) || load.job < 1024 || load.job > gpu::kServiceMaxJob ||
      beside_mib < 0 || beside_mib > 4096 || beside_stores < 0 || beside_stores > 1024) {
    fprintf(stderr, "--inflight: 1..%u; --job-kib: 1..%llu; --beside-d2h: 0..4096; --beside-stores: 0..1024\n",
            gpu::kServiceRing,
            static_cast<unsigned long long>(gpu::kServiceMaxJob >> 10));
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("# resident codec, %s, %d SMs; bf16 N(0, 0.02^2)\n", prop.name, prop.multiProcessorCount);
  const std::vector<uint8_t> x = gaussian(Codec::BF16, size_t(8) << 20, 1, 0.02f);
  // Each buffer set's input starts job/8 further into the data: different bytes, the same statistics.
  const std::vector<uint8_t> sx =
      load.job == size_t(512) << 10 ? x : gaussian(Codec::BF16, load.job + (kDataSets - 1) * load.job / 8, 1, 0.02f);
  DataSet lat, sus[2];
  for (size_t n : {size_t(128) << 10, size_t(512) << 10, size_t(4) << 20})
    lat.push_back(std::make_unique<Data>(x.data(), n, false));
  for (int host = 0; host < 2; ++host)
    for (int i = 0; i < kDataSets; ++i)
      sus[host].push_back(std::make_unique<Data>(sx.data() + i * load.job / 8, load.job, host));
  std::unique_ptr<Data> beside_data;
  std::unique_ptr<D2hLoad> d2h;
  if (beside_mib > 0) {
    beside_data = std::make_unique<Data>(x.data(), size_t(1) << 20, true);
    d2h = std::make_unique<D2hLoad>(size_t(beside_mib) << 20, beside_stores);
  }
  Service sv;
  if (one_buffer) sv.one_buffer();
  printf("# each CTA stages its next tile (encodes; decodes from pinned host, sm_90): %s\n",
         sv.staging() ? "yes (two tile buffers)" : "no (one tile buffer)");
  for (int c : ctas) {
    std::unique_ptr<SmPartition> part;
    std::string why = "--per-sm=1";
    if (per_sm > 1) part = SmPartition::create(0, partition_sms(c, per_sm), 0, &why);
    const double start_us = sv.start(c, part ? part->stream() : nullptr);
    printf("\n## %d CTAs, %s, running %.1f us after the launch call\n\n", c,
           part ? ("on an SM partition of " + std::to_string(part->sms()) + " SMs").c_str()
                : ("spread (no SM partition: " + why + ")").c_str(),
           start_us);
    if (only_op < 0) {
      latency(sv, lat, quick ? 50 : 300);
      printf("\n");
    }
    if (d2h) {
      latency_beside_d2h(sv, *beside_data, *d2h, quick ? 50 : 300);
      printf("\n");
    }
    // The same bytes whatever the job size (512 KiB jobs: 2,048).
    const int jobs = int(std::max<size_t>(64, ((quick ? 256 : 2048) * (size_t(512) << 10)) / load.job));
    sustained(sv, sus, load, jobs, c, only_op, only_host);
    sv.stop();
    printf("\n(the CTAs ran on %d SMs)\n", sv.sms(c));
#ifdef ZIPCCL_GPU_TRACE
    print_trace(c, only_op == kEncode);
#endif
  }
  return 0;
}
