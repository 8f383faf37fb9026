// GPU codec benchmark: bulk throughput against a device-to-device copy measured in the same
// run, and per-message latency from launch until the host can read the compressed size, beside
// the floors under it (empty kernels, a flag-setting kernel, the format's chain without coding).
// Usage: gpu_codec_bench [--quick | --bulk | --queued | --trace]. Prints markdown tables (--bulk:
// the bulk table only; --queued: the bulk table with each timed launch queued behind a gate
// kernel; --trace, in builds with ZIPCCL_GPU_TRACE: the kernels' phase clocks and when their
// tiles ran).
#include <initializer_list>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "zipccl/codec.h"
#include "zipccl/gpu_codec.h"
#include "bench_util.h"
#include "clock.cuh"
#include "ordering.cuh"  // the codec's completion orderings, for the chain floor

using namespace zipccl;
using namespace zipccl::bench;

namespace {

struct Ctx {
  cudaStream_t s;
  cudaEvent_t a, b;
  void* temp;
  size_t temp_bytes;
  gpu::Result* res;  // pinned
};

// Holds the stream for `ns` of GPU time, so that the launches the host makes meanwhile are
// queued when the next event is recorded: the event pair then times the GPU's work alone, not
// the host's launch calls.
__global__ void gate_kernel(long long ns) {
  const unsigned long long t0 = zipccl::gpu::detail::globaltimer_ns();
  while (zipccl::gpu::detail::globaltimer_ns() - t0 < static_cast<unsigned long long>(ns)) {
  }
}
constexpr long long kGateNs = 40000;

// Milliseconds between two events around the work `launch` puts on c.s; with `queued`, that
// work waits behind a gate kernel, so the events time the GPU's work alone.
template <class F>
float timed_ms(Ctx& c, bool queued, F launch) {
  if (queued) gate_kernel<<<1, 1, 0, c.s>>>(kGateNs);
  CK(cudaEventRecord(c.a, c.s));
  launch();
  CK(cudaEventRecord(c.b, c.s));
  CK(cudaEventSynchronize(c.b));
  float ms;
  CK(cudaEventElapsedTime(&ms, c.a, c.b));
  return ms;
}

// A plain SM copy (16-byte vectors, four loads in flight per thread, a grid of `ctas`), to tell
// what a kernel that only moves the bytes reaches, beside cudaMemcpyAsync.
__global__ void __launch_bounds__(256) copy_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, size_t n) {
  const size_t stride = size_t(gridDim.x) * 1024;
  for (size_t i = size_t(blockIdx.x) * 1024 + threadIdx.x; i < n; i += stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + 256 * k < n) v[k] = x[i + 256 * k];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + 256 * k < n) y[i + 256 * k] = v[k];
  }
}

// Bytes read + written per second by a device-to-device copy of `bytes` (a multiple of 16):
// cudaMemcpyAsync, or copy_kernel with `ctas` CTAs when ctas > 0.
double copy_bandwidth(Ctx& c, size_t bytes, int reps, bool queued, int ctas = 0) {
  void *x, *y;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMemset(x, 1, bytes));
  std::vector<double> t;
  for (int i = 0; i < reps + 3; ++i) {
    const float ms = timed_ms(c, queued, [&] {
      if (ctas > 0) {
        copy_kernel<<<ctas, 256, 0, c.s>>>(static_cast<const uint4*>(x), static_cast<uint4*>(y), bytes / 16);
        CK(cudaGetLastError());
      } else {
        CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, c.s));
      }
    });
    if (i >= 3) t.push_back(ms);
  }
  cudaFree(x);
  cudaFree(y);
  return 2.0 * bytes / (median(t) * 1e-3);  // bytes read + written per second
}

struct Bulk {
  double enc_gbs, dec_gbs, ratio;
};

// One message of `bytes` to encode into a buffer of max_compressed_bytes(bytes), and its
// message (msg_bytes of it) to decode back into `bytes`.
gpu::EncodeItem encode_item(const void* in, size_t bytes, void* msg, Codec codec = Codec::BF16,
                            bool auto_codec = false) {
  gpu::EncodeItem e;
  e.in = in;
  e.bytes = bytes;
  e.out = msg;
  e.out_cap = max_compressed_bytes(bytes);
  e.codec = codec;
  e.auto_codec = auto_codec;
  return e;
}
gpu::DecodeItem decode_item(const void* msg, size_t msg_bytes, void* out, size_t bytes) {
  gpu::DecodeItem d;
  d.in = msg;
  d.in_bytes = msg_bytes;
  d.out = out;
  d.out_cap = bytes;
  return d;
}

// Bulk throughput of one message of `bytes`, two buffer sets alternated so that repeats do
// not run from L2.
Bulk bulk(Ctx& c, Codec codec, bool auto_codec, size_t bytes, int reps, bool queued) {
  const auto host = gaussian(codec, bytes, 1, 1.0f);
  uint8_t *in[2], *msg[2], *out[2];
  for (int k = 0; k < 2; ++k) {
    CK(cudaMalloc(&in[k], bytes));
    CK(cudaMalloc(&msg[k], max_compressed_bytes(bytes)));
    CK(cudaMalloc(&out[k], bytes));
    CK(cudaMemcpy(in[k], host.data(), bytes, cudaMemcpyHostToDevice));
  }
  std::vector<double> te, td;
  uint64_t msg_bytes = 0;
  for (int i = 0; i < reps + 3; ++i) {
    const int k = i & 1;
    const gpu::EncodeItem e = encode_item(in[k], bytes, msg[k], codec, auto_codec);
    const float enc_ms = timed_ms(c, queued, [&] { CK(gpu::encode_batch(&e, 1, c.temp, c.temp_bytes, c.res, c.s)); });
    if (c.res[0].status != 0) {
      fprintf(stderr, "encode status %d\n", c.res[0].status);
      exit(1);
    }
    msg_bytes = c.res[0].bytes;
    if (i >= 3) te.push_back(enc_ms);
    const gpu::DecodeItem d = decode_item(msg[k], msg_bytes, out[k], bytes);
    const float dec_ms = timed_ms(c, queued, [&] { CK(gpu::decode_batch(&d, 1, c.temp, c.temp_bytes, c.res, c.s)); });
    if (c.res[0].status != 0) {
      fprintf(stderr, "decode status %d\n", c.res[0].status);
      exit(1);
    }
    if (i >= 3) td.push_back(dec_ms);
  }
  // The last round trip must restore the input, and the message must equal the CPU's.
  std::vector<uint8_t> back(bytes), gmsg(msg_bytes), ref(max_compressed_bytes(bytes));
  CK(cudaMemcpy(back.data(), out[(reps + 2) & 1], bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gmsg.data(), msg[(reps + 2) & 1], msg_bytes, cudaMemcpyDeviceToHost));
  size_t ref_len = 0;
  zipccl::encode(auto_codec ? classify(host.data(), bytes) : codec, host.data(), bytes, ref.data(),
                 ref.size(), &ref_len);
  if (back != host || ref_len != msg_bytes || memcmp(ref.data(), gmsg.data(), msg_bytes) != 0) {
    fprintf(stderr, "bulk round trip or CPU comparison FAILED\n");
    exit(1);
  }
  for (int k = 0; k < 2; ++k) {
    cudaFree(in[k]);
    cudaFree(msg[k]);
    cudaFree(out[k]);
  }
  return {bytes / (median(te) * 1e-3) / 1e9, bytes / (median(td) * 1e-3) / 1e9, double(msg_bytes) / bytes};
}

// The floor under the latency numbers: an empty kernel with a small or a codec-sized
// (3.6 KB) parameter block, launch -> event complete as seen by the host.
struct BigParam {
  unsigned char b[3600];
};
__global__ void empty_small(int) {}
__global__ void empty_big(const __grid_constant__ BigParam) {}
// The least a kernel does to tell the host it is done: a flag in pinned memory, as the codec's
// Result::done.
__global__ void flag_big(const __grid_constant__ BigParam, volatile uint8_t* done) {
  if (threadIdx.x == 0) *done = 1;
}

// The small-message rows' floor below the codec: the format's dependency chain without its
// coding. A CTA of 256 threads per tile of kVec x 4 KiB (2: the codec's small launches; 8: its
// bulk tiles). Per tile, by `steps`: (0) only the codec's completion - count the tile in its
// item's counter (an acquire-release add); the item's last tile clears the item's words and
// sets the item's Result::done; (1) before that, load the tile, one CTA reduction (the window
// statistic; its count stands for the escapes), store 11/16 of it (a bf16 message's share);
// (2) also publish the count and sum those of all earlier tiles of the item (one round of
// loads once they are published: the escape offset) and store that. `words`: tiles + 1 per
// item, zero before and after.
constexpr int kChainItemBytes = 512 << 10;
// A tile's data steps: load kVec 16-byte vectors per thread, one CTA reduction (its count is
// returned), store chain_out() of the tile's vectors (11/16) at the CTA's slot of `out`.
template <int kVec, int kThreads>
__host__ __device__ constexpr int chain_out() {
  return kVec * kThreads * 11 / 16;
}
template <int kVec, int kThreads>
__device__ unsigned chain_tile_data(const uint4* in, uint4* out) {
  uint4 v[kVec];
  unsigned bits = 0;
#pragma unroll
  for (int k = 0; k < kVec; ++k) v[k] = in[(size_t(blockIdx.x) * kVec + k) * kThreads + threadIdx.x];
#pragma unroll
  for (int k = 0; k < kVec; ++k) bits ^= v[k].x ^ v[k].w;
  const unsigned count = __syncthreads_count(bits & 0x8000);
#pragma unroll
  for (int k = 0; k < kVec; ++k)
    if (k * kThreads + threadIdx.x < chain_out<kVec, kThreads>())
      out[size_t(blockIdx.x) * chain_out<kVec, kThreads>() + k * kThreads + threadIdx.x] = v[k];
  return count;
}
template <int kVec>
__global__ void __launch_bounds__(256) chain_floor(const __grid_constant__ BigParam, const uint4* in, uint4* out,
                                                   unsigned* words, gpu::Result* res, int steps) {
  constexpr int kTiles = kChainItemBytes / (kVec * 4096), kOut = chain_out<kVec, 256>();
  static_assert(kTiles <= 64, "one round of look-back loads");
  __shared__ bool last;
  const int item = blockIdx.x / kTiles, t = blockIdx.x % kTiles;
  unsigned* w = words + item * (kTiles + 1);
  if (steps >= 1) {
    const unsigned count = chain_tile_data<kVec, 256>(in, out);
    if (steps >= 2) {
      if (threadIdx.x == 0) *reinterpret_cast<volatile unsigned*>(&w[t]) = 0x80000000u | count;
      if (threadIdx.x < 32) {
        const volatile unsigned* vw = w;
        const int lane = threadIdx.x;
        unsigned x = lane < t ? vw[lane] : 0x80000000u, y = lane + 32 < t ? vw[lane + 32] : 0x80000000u;
        while (!(x >> 31)) x = vw[lane];
        while (!(y >> 31)) y = vw[lane + 32];
        const unsigned offset = __reduce_add_sync(~0u, (x & 0x7fffffffu) + (y & 0x7fffffffu));
        if (lane == 0) out[size_t(gridDim.x) * kOut + blockIdx.x] = make_uint4(offset, count, 0, 0);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) last = gpu::detail::count_acq_rel(&w[kTiles]) == kTiles - 1;
  __syncthreads();
  if (!last) return;
  if (threadIdx.x <= kTiles) w[threadIdx.x] = 0;
  __syncthreads();
  if (threadIdx.x == 0) gpu::detail::set_flag_release_sys(&res[item].done);
}

// The same chain with a thread-block cluster per item (sm_90): 1024-thread CTAs, kVec x 16 KiB
// each; the counts are exchanged through distributed shared memory and the cluster's barriers
// stand for the look-back and the completion counter (no words in global memory).
template <int kVec>
__global__ void __launch_bounds__(1024) chain_cluster(const __grid_constant__ BigParam, const uint4* in, uint4* out,
                                                      gpu::Result* res) {
#if __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int kOut = chain_out<kVec, 1024>();
  __shared__ unsigned count_s;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned count = chain_tile_data<kVec, 1024>(in, out);
  if (threadIdx.x == 0) count_s = count;
  cluster.sync();
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x < 32) {
    const unsigned c = threadIdx.x < rank ? *cluster.map_shared_rank(&count_s, threadIdx.x) : 0;
    const unsigned offset = __reduce_add_sync(~0u, c);
    if (threadIdx.x == 0) out[size_t(gridDim.x) * kOut + blockIdx.x] = make_uint4(offset, count, 0, 0);
  }
  cluster.sync();  // every store of the item made, every remote read done
  if (rank == 0 && threadIdx.x == 0) gpu::detail::set_flag_release_sys(&res[blockIdx.x / cluster.num_blocks()].done);
#endif
}

// Host clock from the `launch` call until `done()` holds (the stream drained between repeats),
// median of `reps` after 20 warm-ups.
template <class F, class D>
double host_latency_us(cudaStream_t s, F launch, D done, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps + 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    launch();
    while (!done()) {
    }
    const auto t1 = std::chrono::steady_clock::now();
    CK(cudaStreamSynchronize(s));
    if (i >= 20) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return median(t);
}
// ... until an event recorded after `launch` completes.
template <class F>
double event_latency_us(cudaStream_t s, F launch, int reps) {
  cudaEvent_t done;
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const double us = host_latency_us(
      s,
      [&] {
        launch();
        CK(cudaEventRecord(done, s));
      },
      [&] { return cudaEventQuery(done) != cudaErrorNotReady; }, reps);
  cudaEventDestroy(done);
  return us;
}

// The chain floor rows: 1 and 8 items of 512 KiB; chain_floor in 8 and 32 KiB tiles with each
// step count, and chain_cluster (sm_90) with clusters of 8 and 16 CTAs. Launch -> every item's
// done flag seen by the host (as the polling column), and queued between events.
void chain_floors(Ctx& c, const BigParam& big_param) {
  constexpr int kItems = 8;
  constexpr size_t kIn = size_t(kItems) * kChainItemBytes;
  constexpr int kWords = 64 + 1;  // per item: up to 64 tiles' counts, then the item's counter
  uint4 *in, *out;
  unsigned* words;
  CK(cudaMalloc(&in, kIn));
  CK(cudaMalloc(&out, kIn));  // 11/16 of the input and 16 bytes per tile
  CK(cudaMalloc(&words, kItems * kWords * sizeof(unsigned)));
  CK(cudaMemcpy(in, gaussian(Codec::BF16, kIn, 3, 0.02f).data(), kIn, cudaMemcpyHostToDevice));
  CK(cudaMemset(words, 0, kItems * kWords * sizeof(unsigned)));
  int major = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major >= 9) CK(cudaFuncSetAttribute(chain_cluster<2>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  printf("\n| chain floor (no coding) | launch -> done flags seen by the host, median of 500, us | queued, between "
         "events, median of 100, us |\n| --- | --- | --- |\n");
  const auto row = [&](int items, const char* layout, const char* steps, auto launch) {
    const double host = host_latency_us(
        c.s,
        [&] {
          for (int k = 0; k < items; ++k) c.res[k].done = 0;
          launch();
        },
        [&] {
          for (int k = 0; k < items; ++k)
            if (!*reinterpret_cast<volatile uint8_t*>(&c.res[k].done)) return false;
          return true;
        },
        500);
    std::vector<double> t;
    for (int i = 0; i < 100; ++i) t.push_back(timed_ms(c, true, launch) * 1e3);
    printf("| %d x 512 KiB, %s: %s | %.1f | %.1f |\n", items, layout, steps, host, median(t));
  };
  const char* step_names[] = {"completion only", "load, reduce, store, completion",
                              "load, reduce, store, escape offset, completion"};
  for (const int items : {1, kItems}) {
    for (int steps = 0; steps < 3; ++steps) {
      row(items, "8 KiB tiles", step_names[steps], [&] {
        chain_floor<2><<<items * 64, 256, 0, c.s>>>(big_param, in, out, words, c.res, steps);
        CK(cudaGetLastError());  // (a failed launch would never set the flags)
      });
      row(items, "32 KiB tiles", step_names[steps], [&] {
        chain_floor<8><<<items * 16, 256, 0, c.s>>>(big_param, in, out, words, c.res, steps);
        CK(cudaGetLastError());
      });
    }
    for (const int ctas : {8, 16}) {
      if (major < 9) break;
      char layout[64];
      snprintf(layout, sizeof layout, "a cluster of %d CTAs of 1024 threads per item", ctas);
      row(items, layout, step_names[2], [&] {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim = {unsigned(ctas), 1, 1};
        cfg.gridDim = items * ctas;
        cfg.blockDim = 1024;
        cfg.stream = c.s;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        const uint4* cin = in;
        CK(ctas == 8 ? cudaLaunchKernelEx(&cfg, chain_cluster<4>, big_param, cin, out, c.res)
                     : cudaLaunchKernelEx(&cfg, chain_cluster<2>, big_param, cin, out, c.res));
      });
    }
  }
  std::vector<unsigned> back(kItems * kWords);
  CK(cudaMemcpy(back.data(), words, back.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (unsigned v : back)
    if (v != 0) {
      fprintf(stderr, "chain_floor left its words nonzero\n");
      exit(1);
    }
  cudaFree(in);
  cudaFree(out);
  cudaFree(words);
}

struct Lat {
  double enc_med, enc_p90, dec_med, dec_p90, poll_med, enc_gpu_us, dec_gpu_us;
};

// Host-observed latency: from the launch call until cudaEventQuery reports the event after
// it complete (the size is then readable in pinned memory). Also: polling Result::done
// instead of the event, and the encode and decode kernels alone (events, queued behind a gate).
Lat latency(Ctx& c, size_t bytes, int batch, int reps, bool auto_codec = false) {
  const auto host = gaussian(Codec::BF16, bytes, 2, 0.02f);
  std::vector<uint8_t*> in(batch), msg(batch), out(batch);
  std::vector<gpu::EncodeItem> e(batch);
  std::vector<gpu::DecodeItem> d(batch);
  for (int i = 0; i < batch; ++i) {
    CK(cudaMalloc(&in[i], bytes));
    CK(cudaMalloc(&msg[i], max_compressed_bytes(bytes)));
    CK(cudaMalloc(&out[i], bytes));
    CK(cudaMemcpy(in[i], host.data(), bytes, cudaMemcpyHostToDevice));
    e[i] = encode_item(in[i], bytes, msg[i], Codec::BF16, auto_codec);
  }
  cudaEvent_t done;
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  using clk = std::chrono::steady_clock;
  std::vector<double> te, td, tp, tg, tdg;
  for (int i = 0; i < reps + 20; ++i) {
    auto t0 = clk::now();
    CK(gpu::encode_batch(e.data(), batch, c.temp, c.temp_bytes, c.res, c.s));
    CK(cudaEventRecord(done, c.s));
    while (cudaEventQuery(done) == cudaErrorNotReady) {
    }
    auto t1 = clk::now();
    for (int k = 0; k < batch; ++k) {
      if (c.res[k].status != 0) {
        fprintf(stderr, "encode status %d\n", c.res[k].status);
        exit(1);
      }
      d[k] = decode_item(msg[k], c.res[k].bytes, out[k], bytes);
    }
    auto t2 = clk::now();
    CK(gpu::decode_batch(d.data(), batch, c.temp, c.temp_bytes, c.res, c.s));
    CK(cudaEventRecord(done, c.s));
    while (cudaEventQuery(done) == cudaErrorNotReady) {
    }
    auto t3 = clk::now();
    for (int k = 0; k < batch; ++k)
      if (c.res[k].status != 0) {
        fprintf(stderr, "decode status %d\n", c.res[k].status);
        exit(1);
      }
    // Polling the done flags in pinned memory instead of an event.
    for (int k = 0; k < batch; ++k) c.res[k].done = 0;
    auto t4 = clk::now();
    CK(gpu::encode_batch(e.data(), batch, c.temp, c.temp_bytes, c.res, c.s));
    for (int k = 0; k < batch; ++k)
      while (!*reinterpret_cast<volatile uint8_t*>(&c.res[k].done)) {
      }
    auto t5 = clk::now();
    CK(cudaStreamSynchronize(c.s));
    const double enc_gpu =
        timed_ms(c, true, [&] { CK(gpu::encode_batch(e.data(), batch, c.temp, c.temp_bytes, c.res, c.s)); }) * 1e3;
    const double dec_gpu =
        timed_ms(c, true, [&] { CK(gpu::decode_batch(d.data(), batch, c.temp, c.temp_bytes, c.res, c.s)); }) * 1e3;
    if (i >= 20) {
      te.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      td.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
      tp.push_back(std::chrono::duration<double, std::micro>(t5 - t4).count());
      tg.push_back(enc_gpu);
      tdg.push_back(dec_gpu);
    }
  }
  for (int i = 0; i < batch; ++i) {
    cudaFree(in[i]);
    cudaFree(msg[i]);
    cudaFree(out[i]);
  }
  cudaEventDestroy(done);
  return {median(te), pct(te, 0.9), median(td), pct(td, 0.9), median(tp), median(tg), median(tdg)};
}


#ifdef ZIPCCL_GPU_TRACE
// Phase clocks (kernels/cuda/trace.cuh) of encode and decode launches of one bf16 message,
// each queued behind a gate kernel, `repeat` launches back to back of which the last is read
// (1: the kernel runs after the other codec's, as in the plugin; 2: after itself). Per phase,
// the median / p90 over the data tiles and launches, in SM cycles; the last CTA's finalize as
// slot 10 - slot 9 of the CTA where it is largest; the kernel span from the first entry to the
// last exit by %globaltimer, and percentiles of the last launch's tile entries, exits and
// lifetimes by the same clock.
void trace(Ctx& c, size_t bytes, int launches, int repeat, bool auto_codec = false) {
  const bool bulk = bytes >= (size_t(16) << 20);
  const auto host = gaussian(Codec::BF16, bytes, 2, bulk ? 1.0f : 0.02f);
  uint8_t *in, *msg, *out;
  CK(cudaMalloc(&in, bytes));
  CK(cudaMalloc(&msg, max_compressed_bytes(bytes)));
  CK(cudaMalloc(&out, bytes));
  CK(cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice));
  static unsigned long long tr[gpu::kTraceTiles][gpu::kTraceSlots];
  // Data tiles per launch: 8 KiB each, bulk launches 32 KiB (encode) and 16 KiB (decode).
  const size_t tiles[2] = {std::min<size_t>(gpu::kTraceTiles, bytes / (bulk ? 32768 : 8192)),
                           std::min<size_t>(gpu::kTraceTiles, bytes / (bulk ? 16384 : 8192))};
  std::vector<double> phase[2][11], span[2];
  std::vector<double> plan0;  // encode: tile 0's entry -> plan (an auto item's classifier; nothing to wait for)
  std::vector<double> enter[2], leave[2], life[2];  // the last launch's tiles, us after the first entry
  uint64_t msg_bytes = 0;
  for (int i = 0; i < launches + 3; ++i) {
    for (int dir = 0; dir < 2; ++dir) {
      gate_kernel<<<1, 1, 0, c.s>>>(kGateNs);
      for (int r = 0; r < repeat; ++r) {
        if (dir == 0) {
          const gpu::EncodeItem e = encode_item(in, bytes, msg, Codec::BF16, auto_codec);
          CK(gpu::encode_batch(&e, 1, c.temp, c.temp_bytes, c.res, c.s));
        } else {
          const gpu::DecodeItem d = decode_item(msg, msg_bytes, out, bytes);
          CK(gpu::decode_batch(&d, 1, c.temp, c.temp_bytes, c.res, c.s));
        }
        CK(cudaStreamSynchronize(c.s));
        if (c.res[0].status != 0) {
          fprintf(stderr, "trace: status %d\n", c.res[0].status);
          exit(1);
        }
        if (dir == 0) msg_bytes = c.res[0].bytes;
      }
      CK(dir == 0 ? gpu::read_encode_trace(tr) : gpu::read_decode_trace(tr));
      if (i < 3) continue;
      unsigned long long first = ~0ull, end = 0;
      double fin = 0;
      for (size_t t = 0; t < tiles[dir]; ++t) {
        for (int k = 1; k <= 9; ++k) {
          if (dir == 1 && k == 7) continue;  // the decoder has no slot 7
          const int prev = dir == 1 && k == 8 ? 6 : k - 1;
          phase[dir][k].push_back(double(tr[t][k] - tr[t][prev]));
        }
        phase[dir][0].push_back(double(tr[t][9] - tr[t][0]));
        fin = std::max(fin, double(tr[t][10] - tr[t][9]));
        first = std::min(first, tr[t][12]);
        end = std::max(end, tr[t][13]);
      }
      if (dir == 0) plan0.push_back(double(tr[0][1] - tr[0][0]));
      phase[dir][10].push_back(fin);
      span[dir].push_back(double(end - first));
      enter[dir].clear(), leave[dir].clear(), life[dir].clear();
      for (size_t t = 0; t < tiles[dir]; ++t) {
        enter[dir].push_back((tr[t][12] - first) / 1e3);
        leave[dir].push_back((tr[t][13] - first) / 1e3);
        life[dir].push_back((tr[t][13] - tr[t][12]) / 1e3);
      }
    }
  }
  static const char* names[2][11] = {
      {"entry to finish", "entry -> plan", "-> tile data staged", "-> window base", "-> coded",
       "-> escape scan", "-> look-back done", "-> entries, escapes", "-> before finish", "finish (fence, atomic)",
       "last CTA's finalize"},
      {"entry to finish", "entry -> header, entries", "-> staging issued", "-> escape chunks staged",
       "-> data waited for", "-> escape scan", "-> decoded", "", "-> before finish",
       "finish (fence, atomic)", "last CTA's finalize"}};
  printf("\n%zu KiB bf16%s, %s launch: kernel span encode %.2f us, decode %.2f us (median)%s\n", bytes >> 10,
         auto_codec ? " (auto codec)" : "", repeat == 1 ? "one" : "second back-to-back", median(span[0]) / 1e3,
         median(span[1]) / 1e3,
         bulk ? "; bulk: the tiles do not finish items (the follow-up kernels do; not traced)" : "");
  printf("encode tile 0, entry -> plan: %.0f SM cycles (median)\n", median(plan0));
  printf("| phase (SM cycles, median / p90) | encode | phase | decode |\n| --- | --- | --- | --- |\n");
  for (int k = 0; k <= 10; ++k) {
    printf("| %s | %.0f / %.0f |", names[0][k], median(phase[0][k]), pct(phase[0][k], 0.9));
    if (k == 7)
      printf(" | |\n");
    else
      printf(" %s | %.0f / %.0f |\n", names[1][k], median(phase[1][k]), pct(phase[1][k], 0.9));
  }
  // When the tiles ran (the waves, the first wave's start and the last tiles' tail).
  printf("\n| last launch, us after the first tile's entry | p0 | p10 | p25 | p50 | p75 | p90 | p99 | p100 |\n"
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int dir = 0; dir < 2; ++dir) {
    const char* what[3] = {"tile entries", "tile exits", "tile lifetimes"};
    const std::vector<double>* v[3] = {&enter[dir], &leave[dir], &life[dir]};
    for (int k = 0; k < 3; ++k) {
      printf("| %s: %s |", dir ? "decode" : "encode", what[k]);
      for (double q : {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0}) printf(" %.2f |", pct(*v[k], q));
      printf("\n");
    }
  }
  cudaFree(in);
  cudaFree(msg);
  cudaFree(out);
}
#endif
}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  const bool profile = argc > 1 && !strcmp(argv[1], "--profile");  // a few bulk launches for ncu
  const char* profile_name = profile && argc > 3 ? argv[3] : "bf16";
  const Codec profile_codec = !strcmp(profile_name, "fp16")   ? Codec::FP16
                              : !strcmp(profile_name, "fp32") ? Codec::FP32
                                                              : Codec::BF16;
  if (profile_codec == Codec::BF16 && strcmp(profile_name, "bf16")) {
    fprintf(stderr, "--profile MiB CODEC: %s is not bf16, fp16 or fp32\n", profile_name);
    return 2;
  }
  const bool queued = argc > 1 && !strcmp(argv[1], "--queued");
  const bool bulk_only = queued || (argc > 1 && !strcmp(argv[1], "--bulk"));
  if (!have_cuda_device("gpu_codec_bench")) return 0;
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  printf("device: %s, %d SMs, L2 %d MiB\n\n", p.name, p.multiProcessorCount, p.l2CacheSize >> 20);
  Ctx c;
  CK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
  CK(cudaEventCreate(&c.a));
  CK(cudaEventCreate(&c.b));
  const size_t big = size_t(quick ? 64 : 256) << 20;
  c.temp_bytes = gpu::temp_bytes_bound(big, gpu::kMaxBatch);
  CK(cudaMalloc(&c.temp, c.temp_bytes));
  CK(gpu::init_temp(c.temp, c.temp_bytes, c.s));
  CK(cudaMallocHost(&c.res, gpu::kMaxBatch * sizeof(gpu::Result)));
  const int reps = quick ? 10 : 30;
  if (argc > 1 && !strcmp(argv[1], "--trace")) {
#ifdef ZIPCCL_GPU_TRACE
    trace(c, size_t(512) << 10, 100, 1);
    trace(c, size_t(512) << 10, 100, 2);
    trace(c, size_t(512) << 10, 100, 1, true);
    trace(c, size_t(512) << 10, 100, 2, true);
    trace(c, size_t(4) << 20, 50, 1);
    trace(c, size_t(64) << 20, 10, 1);
    return 0;
#else
    fprintf(stderr, "--trace needs a build with -DZIPCCL_GPU_TRACE=ON\n");
    return 2;
#endif
  }
  if (profile) {  // --profile [MiB [bf16|fp16|fp32]]: the bulk message (64 MiB of bf16 by default)
    const size_t mib = argc > 2 ? strtoul(argv[2], nullptr, 10) : 64;
    bulk(c, profile_codec, false, mib << 20, 2, false);
    latency(c, size_t(512) << 10, 1, 2);
    return 0;
  }

  const double copy = copy_bandwidth(c, size_t(1) << 30, reps, queued);
  // An SM copy kernel: one CTA per 16 KiB up to 8 per SM, each running through the rest.
  const auto copy_ctas = [&](size_t bytes) {
    return int(std::min<size_t>((bytes + 16383) / 16384, size_t(8) * p.multiProcessorCount));
  };
  const double kcopy = copy_bandwidth(c, size_t(1) << 30, reps, queued, copy_ctas(size_t(1) << 30));
  printf("device-to-device copy (1 GiB, median of %d): %.0f GB/s (read + write); copy kernel: %.0f GB/s\n\n", reps,
         copy / 1e9, kcopy / 1e9);

  // Last columns: a copy of this message's traffic (input + message bytes) timed alike, against
  // the 1 GiB rate - what even a copy loses at that size to launch, ramp-up and tail - by
  // cudaMemcpyAsync and by the copy kernel (against the 1 GiB cudaMemcpyAsync rate too).
  printf(
      "| bulk message | ratio | encode GB/s | decode GB/s | ceiling GB/s | encode %% | decode %% | same-traffic copy %% "
      "| same-traffic copy kernel %% |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  struct Case {
    const char* name;
    Codec c;
    bool a;
    size_t bytes;
  };
  std::vector<Case> cases = {{"bf16 64 MiB", Codec::BF16, false, size_t(64) << 20},
                             {"bf16 256 MiB", Codec::BF16, false, size_t(256) << 20},
                             {"bf16 64 MiB auto", Codec::BF16, true, size_t(64) << 20},
                             {"fp16 64 MiB", Codec::FP16, false, size_t(64) << 20},
                             {"fp16 64 MiB auto", Codec::FP16, true, size_t(64) << 20},
                             {"fp32 64 MiB", Codec::FP32, false, size_t(64) << 20},
                             {"fp32 64 MiB auto", Codec::FP32, true, size_t(64) << 20},
                             {"bf16 4 MiB", Codec::BF16, false, size_t(4) << 20}};
  for (const Case& k : cases) {
    if (k.bytes > big) continue;
    const Bulk b = bulk(c, k.c, k.a, k.bytes, reps, queued);
    // Input-throughput ceiling: copy bandwidth over bytes moved per input byte (read 1,
    // write ratio).
    const double ceiling = copy / (1.0 + b.ratio) / 1e9;
    const size_t traffic = size_t(k.bytes * (1.0 + b.ratio) / 2) & ~size_t(15);
    const double same = copy_bandwidth(c, traffic, reps, queued);
    const double same_kernel = copy_bandwidth(c, traffic, reps, queued, copy_ctas(traffic));
    printf("| %s | %.4f | %.0f | %.0f | %.0f | %.0f%% | %.0f%% | %.0f%% | %.0f%% |\n", k.name, b.ratio, b.enc_gbs,
           b.dec_gbs, ceiling, 100 * b.enc_gbs / ceiling, 100 * b.dec_gbs / ceiling, 100 * same / copy,
           100 * same_kernel / copy);
  }
  if (bulk_only) return 0;

  {
    BigParam big_param{};
    const double small = event_latency_us(
        c.s, [&] { empty_small<<<1, 32, 0, c.s>>>(0); }, 500);
    const double large = event_latency_us(
        c.s, [&] { empty_big<<<1, 32, 0, c.s>>>(big_param); }, 500);
    printf(
        "\nfloor: empty kernel, launch -> event complete (host, median of 500): %.1f us with a 4-byte "
        "parameter, %.1f us with a 3.6 KB parameter\n",
        small, large);
    std::vector<double> t;
    for (int i = 0; i < 100; ++i) {
      t.push_back(timed_ms(c, true, [&] { empty_big<<<1, 32, 0, c.s>>>(big_param); }) * 1e3);
    }
    printf("empty kernel (3.6 KB parameter) queued behind a gate, between two events: %.1f us (median of 100)\n",
           median(t));
    volatile uint8_t* flag = &c.res[0].done;
    const double flagged = host_latency_us(
        c.s,
        [&] {
          *flag = 0;
          flag_big<<<1, 32, 0, c.s>>>(big_param, flag);
          CK(cudaGetLastError());  // (a failed launch would never set the flag)
        },
        [&] { return *flag != 0; }, 500);
    printf("floor for the polling column: a kernel (3.6 KB parameter) setting a flag in pinned memory, launch -> "
           "flag seen by the host: %.1f us (median of 500)\n",
           flagged);
    chain_floors(c, big_param);
  }
  printf(
      "\n| bf16 message (Gaussian) | encode: launch -> size readable, median (p90) us | decode, median (p90) "
      "us |"
      " encode, polling Result::done, median us | encode / decode kernel, queued (events) us |\n");
  printf("| --- | --- | --- | --- | --- |\n");
  struct L {
    const char* name;
    size_t bytes;
    int batch;
    bool a;  // auto codec, as the plugin encodes
  };
  for (const L& l : {L{"128 KiB", size_t(128) << 10, 1}, L{"512 KiB", size_t(512) << 10, 1},
                     L{"512 KiB, auto codec", size_t(512) << 10, 1, true}, L{"4 MiB", size_t(4) << 20, 1},
                     L{"8 x 512 KiB (one batch)", size_t(512) << 10, 8},
                     L{"8 x 512 KiB, auto codec", size_t(512) << 10, 8, true}}) {
    const Lat t = latency(c, l.bytes, l.batch, quick ? 100 : 500, l.a);
    printf("| %s | %.1f (%.1f) | %.1f (%.1f) | %.1f | %.1f / %.1f |\n", l.name, t.enc_med, t.enc_p90, t.dec_med,
           t.dec_p90, t.poll_med, t.enc_gpu_us, t.dec_gpu_us);
  }
  return 0;
}
