// The resident codec (zipccl/gpu_service.h) driven as the plugin drives it: jobs written into
// mapped pinned memory and published by a store, results polled in memory, no CUDA call between
// launch and stop. Messages must be byte-identical to the CPU codec's, decodes exact, corrupt
// input rejected with the CPU decoder's status, buffers in device or pinned host memory; the
// kernel must exit when asked and start again, many times. The fixture owns the buffers and
// frees them after the kernel has exited: cudaFree waits for a running kernel, so a buffer freed
// while it runs would hang the test. They are allocated before the launch too.
#include "zipccl/gpu_service.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_data.h"
#include "zipccl/codec.h"

using namespace zipccl;
using namespace zipccl::gputest;

namespace {

// How long a job or an exit may take: 10 s, ZIPCCL_GPU_TEST_WAIT_S under a sanitizer, which runs
// the kernel many times slower.
std::chrono::seconds wait_limit() {
  static const long s = [] {
    const char* v = getenv("ZIPCCL_GPU_TEST_WAIT_S");
    return v && atol(v) > 0 ? atol(v) : 10L;
  }();
  return std::chrono::seconds(s);
}

// A while for the kernel's CTAs to settle (each to claim its next ticket): 2 ms, longer as
// wait_limit() is.
std::chrono::microseconds settle_time() {
  return std::chrono::duration_cast<std::chrono::microseconds>(wait_limit()) / 5000;
}

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x << ": " << cudaGetErrorString(x)

constexpr uint32_t kRing = gpu::kServiceRing;

// A buffer the kernel reads or writes: device memory, or mapped pinned host memory (NCCL's host
// buffers and the plugin's host staging are such memory).
struct Buf {
  uint8_t* p = nullptr;
  size_t n = 0;
  bool host = false;
  Buf(size_t bytes, bool in_host) : n(bytes), host(in_host) {
    const size_t alloc = bytes ? bytes : 1;
    if (host)
      cudaHostAlloc(reinterpret_cast<void**>(&p), alloc, cudaHostAllocMapped);
    else
      cudaMalloc(reinterpret_cast<void**>(&p), alloc);
  }
  ~Buf() {
    if (host)
      cudaFreeHost(p);
    else
      cudaFree(p);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void put(const Bytes& b) {
    if (b.empty()) return;
    if (host) {
      std::memcpy(p, b.data(), b.size());
      return;
    }
    // A copy from pageable memory may return before its DMA lands: wait for it.
    cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice);
    cudaStreamSynchronize(nullptr);
  }
  // Device memory: only while the kernel is not resident.
  Bytes get(size_t bytes) const {
    Bytes b(bytes);
    if (!bytes) return b;
    if (host)
      std::memcpy(b.data(), p, bytes);
    else
      cudaMemcpy(b.data(), p, bytes, cudaMemcpyDeviceToHost);
    return b;
  }
};

class Service : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(gpu::ServiceHost), cudaHostAllocMapped));
    std::memset(host_, 0, sizeof *host_);
    CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dhost_), host_, 0));
    CUDA_OK(cudaMalloc(&dev_, gpu::service_device_bytes()));
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_OK(gpu::service_init(dev_, stream_));
    CUDA_OK(cudaStreamSynchronize(stream_));
    CUDA_OK(gpu::service_load(&staging_));
  }
  void TearDown() override {
    if (running_) stop();
    if (running_) {  // freeing anything now would wait for the kernel forever
      std::fprintf(stderr, "the resident kernel did not exit; ending the test program\n");
      std::_Exit(3);
    }
    bufs_.clear();
    cudaStreamDestroy(stream_);
    cudaFree(dev_);
    cudaFreeHost(host_);
  }

  // staging: as service_load() allows, or one tile buffer a CTA (false).
  void launch(int ctas = 8, bool staging = true) {
    host_->stop = 0;
    for (uint32_t& sm : host_->sm) __atomic_store_n(&sm, 0u, __ATOMIC_RELAXED);  // each CTA's, as it starts
    CUDA_OK(gpu::service_launch(dhost_, dev_, ctas, ++generation_, staging && staging_, stream_));
    running_ = true;
  }
  // Waits (in memory) until the kernel says it runs.
  void wait_started() {
    const auto end = std::chrono::steady_clock::now() + wait_limit();
    while (!gpu::service_started(host_, generation_))
      ASSERT_LT(std::chrono::steady_clock::now(), end) << "the kernel did not start";
  }
  // Waits (in memory) until each of the launch's CTAs has started (ServiceHost::sm), then
  // settle_time() for each to claim its first ticket: a job posted sooner may run two of its
  // tiles on a CTA that started early.
  void wait_ctas_started(int ctas) {
    const auto end = std::chrono::steady_clock::now() + wait_limit();
    for (int k = 0; k < ctas; ++k)
      while (__atomic_load_n(&host_->sm[k], __ATOMIC_RELAXED) == 0)
        ASSERT_LT(std::chrono::steady_clock::now(), end) << "CTA " << k << " did not start";
    std::this_thread::sleep_for(settle_time());
  }
  // Asks the kernel to stop and waits (in memory) until its last CTA says it has gone.
  void stop() {
    gpu::service_stop(host_, tail_);
    const auto end = std::chrono::steady_clock::now() + wait_limit();
    while (!gpu::service_exited(host_, generation_))
      ASSERT_LT(std::chrono::steady_clock::now(), end) << "the kernel did not exit when asked";
    running_ = false;
    CUDA_OK(cudaStreamSynchronize(stream_));
  }
  uint64_t submit(const gpu::ServiceJob& j) {
    gpu::service_post(host_, tail_, j);
    return tail_++;
  }
  gpu::Result wait(uint64_t idx) {
    const auto end = std::chrono::steady_clock::now() + wait_limit();
    gpu::Result r{};
    gpu::JobTimes t{};
    while (!gpu::service_poll(host_, idx, &r, &t)) {
      if (std::chrono::steady_clock::now() > end) {
        ADD_FAILURE() << "job " << idx << " never completed";
        return gpu::Result{};
      }
    }
    // Every job's times: taken, its first tile (none where the kernel refused it), its result.
    EXPECT_NE(t.taken, 0u) << "job " << idx;
    EXPECT_GE(t.end, t.taken) << "job " << idx;
    if (t.start) {
      EXPECT_GE(t.start, t.taken) << "job " << idx;
      EXPECT_LE(t.start, t.end) << "job " << idx;
    } else {
      EXPECT_NE(r.status, int32_t(Status::kOk)) << "job " << idx << " coded without a tile";
    }
    return r;
  }
  static gpu::ServiceJob encode_job(const Buf& in, size_t n, Buf& out, Codec c, bool auto_codec, bool checksum) {
    gpu::ServiceJob j{};
    j.op = gpu::kServiceEncode;
    j.in = in.p;
    j.in_bytes = n;
    j.out = out.p;
    j.out_cap = out.n;
    j.limit = coded_limit(n, 1.0);
    j.codec = static_cast<uint8_t>(c);
    j.auto_codec = auto_codec;
    j.checksum = checksum;
    return j;
  }
  static gpu::ServiceJob decode_job(const Buf& in, size_t n, Buf& out) {
    gpu::ServiceJob j{};
    j.op = gpu::kServiceDecode;
    j.in_host = in.host;
    j.in = in.p;
    j.in_bytes = n;
    j.out = out.p;
    j.out_cap = out.n;
    return j;
  }

  Buf& buf(size_t bytes, bool host) {
    bufs_.push_back(std::make_unique<Buf>(bytes, host));
    return *bufs_.back();
  }

  std::vector<std::unique_ptr<Buf>> bufs_;
  gpu::ServiceHost* host_ = nullptr;
  gpu::ServiceHost* dhost_ = nullptr;
  void* dev_ = nullptr;
  cudaStream_t stream_ = nullptr;
  uint32_t generation_ = 0;
  bool staging_ = false;  // service_load()'s
  uint64_t tail_ = 0;
  bool running_ = false;
};

struct Case {
  Bytes data;
  Codec codec;
  bool auto_codec;
  bool checksum;
  bool host;  // buffers in pinned host memory
};

std::vector<Case> cases() {
  std::vector<Case> v;
  Bytes patterns(65536 * 2);  // every 16-bit pattern: NaNs, infinities, zeros, denormals
  for (uint32_t i = 0; i < 65536; ++i) std::memcpy(&patterns[2 * i], &i, 2);
  const size_t sizes[] = {0, 1, 3, 127, 8190, 8194, 65537, 131072, 524288 + 6, (4u << 20) + 2};
  uint32_t seed = 1;
  for (size_t n : sizes) {
    const bool host = seed % 2;
    v.push_back({gaussian(Codec::BF16, n, seed++), Codec::BF16, true, seed % 3 == 0, host});
    v.push_back({gaussian(Codec::FP16, n, seed++), Codec::FP16, false, false, !host});
    v.push_back({gaussian(Codec::FP32, n, seed++), Codec::FP32, false, seed % 4 == 0, host});
    v.push_back({random_bytes(n, seed++), Codec::BF16, true, false, !host});
  }
  v.push_back({patterns, Codec::BF16, false, true, false});
  v.push_back({patterns, Codec::FP16, false, false, true});
  v.push_back({escape_free(Codec::BF16, 3 << 20, 9), Codec::BF16, true, false, true});
  v.push_back({gaussian(Codec::BF16, gpu::kServiceMaxJob, 10), Codec::BF16, false, false, false});
  return v;
}

// Every case encoded by the resident kernel (all in flight at once), compared with the CPU
// encoder's message byte for byte, then decoded by it into a buffer larger than the data (as a
// receive's capacity is) and compared with the input.
TEST_F(Service, MessagesAreTheCpuCodecsAndDecodeExactly) {
  const std::vector<Case> cs = cases();
  std::vector<Buf*> in, msg, back;
  std::vector<Bytes> ref(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    const Case& c = cs[i];
    in.push_back(&buf(c.data.size(), c.host));
    in.back()->put(c.data);
    msg.push_back(&buf(max_compressed_bytes(c.data.size()), !c.host));
    back.push_back(&buf(std::min<size_t>(c.data.size() + 4096, gpu::kServiceMaxJob), c.host));
    const Codec codec = c.auto_codec ? classify(c.data.data(), c.data.size()) : c.codec;
    EncodeOptions opt;
    opt.checksum = c.checksum;
    ref[i].resize(max_compressed_bytes(c.data.size()));
    size_t len = 0;
    ASSERT_EQ(zipccl::encode(codec, c.data.data(), c.data.size(), ref[i].data(), ref[i].size(), &len, opt), Status::kOk);
    ref[i].resize(len);
  }
  ASSERT_NO_FATAL_FAILURE(launch());
  std::vector<uint64_t> idx;
  for (size_t i = 0; i < cs.size(); ++i)
    idx.push_back(submit(encode_job(*in[i], cs[i].data.size(), *msg[i], cs[i].codec, cs[i].auto_codec, cs[i].checksum)));
  for (size_t i = 0; i < cs.size(); ++i) {
    const gpu::Result r = wait(idx[i]);
    ASSERT_EQ(r.status, int(Status::kOk)) << "case " << i;
    ASSERT_EQ(r.bytes, ref[i].size()) << "case " << i << ", " << cs[i].data.size() << " bytes";
    idx[i] = submit(decode_job(*msg[i], r.bytes, *back[i]));
  }
  for (size_t i = 0; i < cs.size(); ++i) {
    const gpu::Result r = wait(idx[i]);
    ASSERT_EQ(r.status, int(Status::kOk)) << "case " << i;
    ASSERT_EQ(r.bytes, cs[i].data.size()) << "case " << i;
  }
  ASSERT_NO_FATAL_FAILURE(stop());
  for (size_t i = 0; i < cs.size(); ++i) {
    ASSERT_EQ(msg[i]->get(ref[i].size()), ref[i]) << "case " << i << ", " << cs[i].data.size() << " bytes";
    ASSERT_EQ(back[i]->get(cs[i].data.size()), cs[i].data) << "case " << i;
  }
}

// Encodes and decodes queued together, inputs at every alignment, in device and pinned host
// memory: a CTA's shared memory serves tile after tile of jobs of either kind, a job's last tile
// beside the next job's first, staging its next tile in its second buffer while it codes one
// (resident.cu, NextTile: an encode after an encode, or on sm_90 an aligned bf16 decode from
// pinned host after such a decode), or with one buffer (`staging` false: sm_86 and sm_89
// always). Every message the CPU encoder's, every decode exact.
class QueuedMixedJobs : public Service, public ::testing::WithParamInterface<bool> {};
TEST_P(QueuedMixedJobs, AtAnyAlignmentAreExact) {
  constexpr int kJobs = 30;
  std::mt19937 g(5);
  const Codec codecs[] = {Codec::BF16, Codec::FP16, Codec::FP32};
  struct Job {
    Bytes data, ref;  // input; encode: the CPU's message; decode: the message is the input
    Codec codec;
    bool encode, auto_codec;
    Buf *in, *out;
    size_t off;
  };
  std::vector<Job> jobs(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    Job& j = jobs[size_t(i)];
    j.codec = codecs[g() % 3];
    const size_t n = 1 + g() % (300u << 10);
    j.data = g() % 5 ? gaussian(j.codec, n, uint32_t(100 + i)) : random_bytes(n, uint32_t(100 + i));
    j.encode = g() % 3 != 0;
    j.auto_codec = g() % 4 == 0;
    const Codec c = j.auto_codec ? classify(j.data.data(), n) : j.codec;
    j.off = i % 8 == 7 ? 16 : size_t(i % 8);  // 0-6 bytes off a 16-byte boundary, or on it
    Bytes msg(max_compressed_bytes(n));
    size_t len = 0;
    ASSERT_EQ(zipccl::encode(c, j.data.data(), n, msg.data(), msg.size(), &len), Status::kOk);
    msg.resize(len);
    const bool host = g() % 2;
    if (j.encode) {
      j.ref = msg;
      j.in = &buf(j.off + n, host);
      j.out = &buf(max_compressed_bytes(n), !host);
    } else {
      j.ref = j.data;
      j.data = msg;
      j.in = &buf(j.off + msg.size(), host);
      j.out = &buf(n + 4096, !host);
    }
    Bytes staged(j.off, 0xA5);
    staged.insert(staged.end(), j.data.begin(), j.data.end());
    j.in->put(staged);
  }
  ASSERT_NO_FATAL_FAILURE(launch(4, GetParam()));
  std::vector<uint64_t> idx;
  for (Job& j : jobs) {
    gpu::ServiceJob sj = j.encode ? encode_job(*j.in, j.data.size(), *j.out, j.codec, j.auto_codec, false)
                                  : decode_job(*j.in, j.data.size(), *j.out);
    sj.in = j.in->p + j.off;
    idx.push_back(submit(sj));
  }
  std::vector<gpu::Result> rs;
  for (uint64_t x : idx) rs.push_back(wait(x));
  ASSERT_NO_FATAL_FAILURE(stop());
  for (int i = 0; i < kJobs; ++i) {
    const Job& j = jobs[size_t(i)];
    ASSERT_EQ(rs[size_t(i)].status, int(Status::kOk)) << "job " << i;
    ASSERT_EQ(rs[size_t(i)].bytes, j.ref.size()) << "job " << i << (j.encode ? " (encode)" : " (decode)");
    ASSERT_EQ(j.out->get(j.ref.size()), j.ref) << "job " << i << (j.encode ? " (encode)" : " (decode)");
  }
}
INSTANTIATE_TEST_SUITE_P(Staging, QueuedMixedJobs, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "AsAllowed" : "OneBuffer"; });

// An encode alone on an idle kernel whose 8 KiB tiles fit one per CTA takes those (resident.cu,
// kSmallTile) and says so (Result::small_tiles), a larger one 32 KiB tiles: a tile a CTA, as the
// CTAs' tile times show (bf16 of 8 KiB and more, whose every tile codes). Each job posted alone,
// with and without staging, its message the CPU encoder's: fixed and auto codecs, checksums, the
// sizes at the limit, empty and 1-byte inputs, inputs off a 16-byte boundary, pinned host memory,
// fp32 (16 KiB blocks: the latter half of its 8 KiB tiles empty; auto: restaged) and incompressible
// bytes (auto: Raw by choice; bf16: coded, then Raw for overflowing its limit).
TEST_F(Service, LoneSmallEncodesTakeATileACta) {
  constexpr int kCtas = 16;
  struct Lone {
    size_t n;
    Codec codec;
    bool auto_codec, checksum, host, random;
    size_t off;
  };
  const Lone cs[] = {
      {kCtas * 8192, Codec::BF16, true, false, false, false, 0},  // 16 tiles of 8 KiB
      {kCtas * 8192 + 2, Codec::BF16, true, false, true, false, 0},  // 5 of 32 KiB
      {8194, Codec::BF16, false, true, true, false, 0},
      {3 * 8192 + 100, Codec::BF16, false, false, false, false, 3},
      {65537, Codec::FP16, false, true, true, false, 0},
      {100000, Codec::FP32, false, false, false, false, 0},
      {100000, Codec::FP32, false, true, true, false, 6},
      {100000, Codec::FP32, true, true, true, false, 5},
      {50000, Codec::BF16, true, false, false, true, 0},
      {50000, Codec::BF16, false, true, true, true, 0},
      {0, Codec::BF16, true, false, false, false, 0},
      {1, Codec::BF16, true, false, true, false, 0},
  };
  struct Job {
    Bytes ref;
    Buf *in, *out;
  };
  std::vector<Job> jobs;
  for (const Lone& c : cs) {
    const Bytes data = c.random ? random_bytes(c.n, uint32_t(c.n)) : gaussian(c.codec, c.n, uint32_t(c.n));
    EncodeOptions opt;
    opt.checksum = c.checksum;
    Bytes ref(max_compressed_bytes(c.n));
    size_t len = 0;
    ASSERT_EQ(zipccl::encode(c.auto_codec ? classify(data.data(), c.n) : c.codec, data.data(), c.n, ref.data(),
                             ref.size(), &len, opt),
              Status::kOk);
    ref.resize(len);
    Job j{ref, &buf(c.off + c.n, c.host), &buf(max_compressed_bytes(c.n), !c.host)};
    Bytes staged(c.off, 0xA5);
    staged.insert(staged.end(), data.begin(), data.end());
    j.in->put(staged);
    jobs.push_back(j);
  }
  const auto ran = [&](const uint64_t (&before)[kCtas]) {
    int n = 0;
    for (int k = 0; k < kCtas; ++k) n += __atomic_load_n(&host_->tile_ns[k][0], __ATOMIC_RELAXED) != before[k];
    return size_t(n);
  };
  for (const bool staging : {true, false}) {
    for (const Job& j : jobs) j.out->put(Bytes(j.out->n, 0xCC));  // none of the other pass's bytes
    ASSERT_NO_FATAL_FAILURE(launch(kCtas, staging));
    ASSERT_NO_FATAL_FAILURE(wait_ctas_started(kCtas));
    for (size_t i = 0; i < jobs.size(); ++i) {
      const Lone& c = cs[i];
      uint64_t before[kCtas];
      for (int k = 0; k < kCtas; ++k) before[k] = __atomic_load_n(&host_->tile_ns[k][0], __ATOMIC_RELAXED);
      gpu::ServiceJob sj = encode_job(*jobs[i].in, c.n, *jobs[i].out, c.codec, c.auto_codec, c.checksum);
      sj.in = jobs[i].in->p + c.off;
      const gpu::Result r = wait(submit(sj));
      ASSERT_EQ(r.status, int(Status::kOk)) << "job " << i;
      ASSERT_EQ(r.bytes, jobs[i].ref.size()) << "job " << i << ", " << c.n << " bytes";
      EXPECT_EQ(r.small_tiles, c.n <= kCtas * gpu::kServiceSmallTile) << "job " << i << ", " << c.n << " bytes";
      // Tiles that may code nothing are not counted. The last tile publishes the result before
      // its CTA counts its time and the tile done: wait for the count, then settle_time(), so
      // that the next job finds the kernel idle.
      if (c.codec == Codec::BF16 && !c.random && c.n >= 8192) {
        const size_t small = (c.n + 8191) / 8192, want = small <= kCtas ? small : (c.n + 32767) / 32768;
        const auto end = std::chrono::steady_clock::now() + wait_limit();
        while (ran(before) < want && std::chrono::steady_clock::now() < end) std::this_thread::yield();
        EXPECT_EQ(ran(before), want) << "job " << i << ", " << c.n << " bytes, staging " << staging;
      }
      std::this_thread::sleep_for(settle_time());
    }
    ASSERT_NO_FATAL_FAILURE(stop());
    for (size_t i = 0; i < jobs.size(); ++i)
      ASSERT_EQ(jobs[i].out->get(jobs[i].ref.size()), jobs[i].ref) << "job " << i << ", staging " << staging;
  }
}

// Two CTAs with two tile buffers fit on an SM of 164 KiB (sm_80) or 228 KiB (sm_90), not of
// 100 KiB (sm_86, sm_89): there launches stage nothing.
TEST_F(Service, StagesWhereTwoCtasWithTwoBuffersFit) {
  int dev = 0, per_sm = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  EXPECT_EQ(staging_, per_sm >= 164 * 1024) << per_sm << " bytes of shared memory an SM";
}

// Each CTA's time coding tiles (ServiceHost::tile_ns, what the engine measures the codec's
// capacity by): counted by op, at most the wall time the jobs took per CTA, only for the CTAs
// launched, and carried on by the next launch.
TEST_F(Service, TileTimeIsCountedPerOpAndKeptAcrossLaunches) {
  constexpr int kCtas = 8;
  const Bytes x = gaussian(Codec::BF16, 4 << 20, 21);
  Buf& in = buf(x.size(), true);
  in.put(x);
  Buf& msg = buf(max_compressed_bytes(x.size()), true);
  Buf& back = buf(x.size(), false);
  ASSERT_NO_FATAL_FAILURE(launch(kCtas));
  ASSERT_NO_FATAL_FAILURE(wait_started());
  const auto t0 = std::chrono::steady_clock::now();
  const gpu::Result e = wait(submit(encode_job(in, x.size(), msg, Codec::BF16, true, false)));
  const double wall_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(e.status, int(Status::kOk));
  ASSERT_NO_FATAL_FAILURE(stop());
  const uint64_t enc = gpu::service_tile_ns(host_, kCtas, 0);
  EXPECT_GT(enc, 0u);
  EXPECT_LE(double(enc) / kCtas, wall_ns + 2000) << "a CTA coded longer than the job took";
  EXPECT_EQ(gpu::service_tile_ns(host_, kCtas, 1), 0u) << "no decode yet";
  EXPECT_EQ(gpu::service_tile_ns(host_, gpu::kServiceMaxCtas, 0), enc) << "only launched CTAs count";
  ASSERT_NO_FATAL_FAILURE(launch(kCtas));
  const gpu::Result d = wait(submit(decode_job(msg, e.bytes, back)));
  ASSERT_EQ(d.status, int(Status::kOk));
  ASSERT_NO_FATAL_FAILURE(stop());
  EXPECT_EQ(back.get(x.size()), x);
  EXPECT_EQ(gpu::service_tile_ns(host_, kCtas, 0), enc) << "the next launch keeps the sums";
  EXPECT_GT(gpu::service_tile_ns(host_, kCtas, 1), 0u);
}

// Corrupt messages: the kernel's status is the CPU decoder's.
TEST_F(Service, CorruptMessagesGetTheCpuDecodersStatus) {
  const Bytes x = gaussian(Codec::BF16, 200000, 3);
  Bytes good(max_compressed_bytes(x.size()));
  size_t len = 0;
  ASSERT_EQ(zipccl::encode(Codec::BF16, x.data(), x.size(), good.data(), good.size(), &len), Status::kOk);
  good.resize(len);
  std::mt19937 g(5);
  std::vector<Bytes> bad;
  for (size_t at : {size_t(0), size_t(4), size_t(5), size_t(8), size_t(16), size_t(40), size_t(130), size_t(200),
                    len / 2, len - 1}) {
    Bytes m = good;
    m[at] ^= uint8_t(1 + g() % 255);
    bad.push_back(m);
  }
  bad.push_back(Bytes(good.begin(), good.begin() + long(len / 3)));  // truncated
  bad.push_back(Bytes(good.begin(), good.begin() + 64));
  std::vector<Buf*> in, out;
  for (const Bytes& m : bad) {
    in.push_back(&buf(m.size(), true));
    in.back()->put(m);
    out.push_back(&buf(x.size(), false));
  }
  ASSERT_NO_FATAL_FAILURE(launch());
  for (size_t k = 0; k < bad.size(); ++k) {
    const Bytes& m = bad[k];
    const gpu::Result r = wait(submit(decode_job(*in[k], m.size(), *out[k])));
    Bytes cpu(x.size());
    size_t cpu_len = 0;
    const Status s = zipccl::decode(m.data(), m.size(), cpu.data(), cpu.size(), &cpu_len);
    EXPECT_EQ(r.status, int(s)) << "corruption of a " << m.size() << "-byte message";
  }
}

// Decode tiles staged ahead (resident.cu's NextTile, decode_tile.cuh's stage_ahead(); sm_90): with
// two CTAs, every data tile of a long bf16 message after the first two is staged by its CTA's tile
// before it, header and entries included. Messages corrupted in their header, entries, planes,
// residuals or escapes, or cut short, get the CPU decoder's status and, where it decodes them,
// its bytes; the intact message decodes exactly.
TEST_F(Service, TilesStagedAheadAreCheckedAsTheyDecode) {
  const Bytes x = gaussian(Codec::BF16, 2 << 20, 31, 0.5f);  // wide: blocks with escapes
  Bytes good(max_compressed_bytes(x.size()));
  size_t len = 0;
  ASSERT_EQ(zipccl::encode(Codec::BF16, x.data(), x.size(), good.data(), good.size(), &len), Status::kOk);
  good.resize(len);
  Header h;
  std::memcpy(&h, good.data(), sizeof h);
  ASSERT_GT(h.esc_bytes, 1000u) << "the data should have escapes";
  std::vector<Bytes> msgs = {good};
  const size_t entry41 = kHeaderBytes + 41 * kBlockEntryBytes;  // block 41: tile 10's second
  for (size_t at : {size_t(40), size_t(56), entry41, entry41 + 4, entry41 + 6, entry41 + 7,
                    size_t(h.off_bits + 5 * h.bit_stride / 8 + 17), size_t(h.off_res + (h.res_stride * 3) / 4),
                    size_t(h.off_esc + h.esc_bytes / 2), size_t(h.off_esc + h.esc_bytes - 1)}) {
    Bytes m = good;
    m[at] ^= 0x5A;
    msgs.push_back(m);
  }
  msgs.push_back(Bytes(good.begin(), good.begin() + long(len * 3 / 4)));
  std::vector<Buf*> in, out;
  for (const Bytes& m : msgs) {
    in.push_back(&buf(m.size(), true));  // pinned host, the socket transport's staging
    in.back()->put(m);
    out.push_back(&buf(x.size() + 4096, false));
  }
  ASSERT_NO_FATAL_FAILURE(launch(2));
  for (size_t k = 0; k < msgs.size(); ++k) {
    const Bytes& m = msgs[k];
    const gpu::Result r = wait(submit(decode_job(*in[k], m.size(), *out[k])));
    Bytes cpu(x.size() + 4096);
    size_t cpu_len = 0;
    const Status s = zipccl::decode(m.data(), m.size(), cpu.data(), cpu.size(), &cpu_len);
    EXPECT_EQ(r.status, int(s)) << "message " << k;
    if (k == 0) {
      EXPECT_EQ(s, Status::kOk);
    }
    if (s == Status::kOk && r.status == int(s)) {
      EXPECT_EQ(r.bytes, cpu_len) << "message " << k;
      cpu.resize(cpu_len);
      EXPECT_EQ(out[k]->get(cpu_len), cpu) << "message " << k;
    }
  }
}

// More jobs than ring slots and than jobs coded at once, a few in flight at a time.
TEST_F(Service, RingAndSlotsWrap) {
  constexpr int kJobs = 3 * kRing, kInflight = 100;
  const Bytes x = gaussian(Codec::BF16, 40000, 8);
  Buf& in = buf(x.size(), false);
  in.put(x);
  std::vector<Buf*> out;
  for (int i = 0; i < kInflight; ++i) out.push_back(&buf(max_compressed_bytes(x.size()), false));
  ASSERT_NO_FATAL_FAILURE(launch());
  std::vector<uint64_t> idx;
  uint64_t first_len = 0;
  for (int i = 0; i < kJobs; ++i) {
    if (i >= kInflight) {
      const gpu::Result r = wait(idx[size_t(i - kInflight)]);
      ASSERT_EQ(r.status, int(Status::kOk));
      if (!first_len) first_len = r.bytes;
      ASSERT_EQ(r.bytes, first_len) << "job " << i - kInflight;
    }
    idx.push_back(submit(encode_job(in, x.size(), *out[size_t(i % kInflight)], Codec::BF16, false, false)));
  }
  for (int i = kJobs - kInflight; i < kJobs; ++i) ASSERT_EQ(wait(idx[size_t(i)]).bytes, first_len);
}

// Stopped and started again many times, with bursts of jobs of random sizes between: every
// message right (read from pinned memory while the kernel runs, as the plugin reads host
// staging), and the kernel gone within a moment of each stop (it never stays idle).
TEST_F(Service, StopsWhenAskedAndStartsAgain) {
  std::mt19937 g(11);
  const Bytes x = gaussian(Codec::BF16, 1 << 20, 12);
  Buf &in = buf(x.size(), false), &out = buf(max_compressed_bytes(x.size()), true);
  in.put(x);
  Bytes ref(max_compressed_bytes(x.size()));
  ASSERT_NO_FATAL_FAILURE(launch());
  ASSERT_NO_FATAL_FAILURE(stop());  // before any job
  for (int cycle = 0; cycle < 200; ++cycle) {
    ASSERT_NO_FATAL_FAILURE(launch(1 + int(g() % 16)));
    ASSERT_NO_FATAL_FAILURE(wait_started());
    const int burst = int(g() % 6);
    for (int k = 0; k < burst; ++k) {
      const size_t n = g() % x.size();
      size_t len = 0;
      ASSERT_EQ(zipccl::encode(Codec::BF16, x.data(), n, ref.data(), ref.size(), &len), Status::kOk);
      const gpu::Result r = wait(submit(encode_job(in, n, out, Codec::BF16, false, false)));
      ASSERT_EQ(r.status, int(Status::kOk));
      ASSERT_EQ(r.bytes, len) << "cycle " << cycle;
      ASSERT_EQ(out.get(len), Bytes(ref.begin(), ref.begin() + long(len))) << "cycle " << cycle;
    }
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_NO_FATAL_FAILURE(stop());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1)) << "cycle " << cycle;
    EXPECT_EQ(cudaStreamQuery(stream_), cudaSuccess) << "the kernel is still running after its exit";
  }
}

TEST_F(Service, RefusesJobsBeyondItsLimit) {
  Buf &in = buf(16, false), &out = buf(16, false);
  ASSERT_NO_FATAL_FAILURE(launch());
  gpu::ServiceJob j = encode_job(in, gpu::kServiceMaxJob + 1, out, Codec::BF16, false, false);
  EXPECT_EQ(wait(submit(j)).status, int(Status::kTooLarge));
  j = decode_job(in, 16, out);
  j.out_cap = gpu::kServiceMaxJob + 1;
  EXPECT_EQ(wait(submit(j)).status, int(Status::kNoSpace));
  j.op = 7;
  EXPECT_EQ(wait(submit(j)).status, int(Status::kBadHeader));
}

}  // namespace
