// GPU codec against the CPU reference codec: byte-identical messages, cross-decoding, the
// same error status on corrupted input, and no write outside the output buffers.
// Set ZIPCCL_GPU_TEST_QUICK=1 for smaller cases (sanitizer runs).
#include "zipccl/gpu_codec.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "test_data.h"
#include "zipccl/codec.h"

using namespace zipccl;
using namespace zipccl::gputest;

namespace {

constexpr size_t kGuard = 64;  // canary bytes after every output buffer
constexpr uint8_t kCanary = 0xA5;

bool quick() {
  return std::getenv("ZIPCCL_GPU_TEST_QUICK") != nullptr;
}

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x << ": " << cudaGetErrorString(x)

struct In {
  Bytes data;
  Codec codec = Codec::BF16;
  bool auto_codec = false;
  size_t in_shift = 0;    // misalignment of the device input pointer
  size_t out_shift = 0;   // misalignment of the device output pointer
  size_t cap = SIZE_MAX;  // default: max_compressed_bytes
};

struct Out {
  gpu::Result r;
  Bytes msg;  // r.bytes bytes of the output buffer
};

// Whether msg decodes to the input x (a message that differs from the CPU's: another valid
// coding, or a corrupt one).
std::string decodes_to(const Bytes& msg, const Bytes& x) {
  Bytes back(x.size() + 1);
  size_t len = 0;
  const Status s = zipccl::decode(msg.data(), msg.size(), back.data(), back.size(), &len);
  if (s != Status::kOk) return "no (status " + std::to_string(int(s)) + ")";
  return len == x.size() && memcmp(back.data(), x.data(), len) == 0 ? "yes" : "no (other bytes)";
}

// Where two equally long messages differ, against the sections of b's layout (header fields),
// and whether a still decodes to the input x.
std::string differences(const Bytes& a, const Bytes& b, const Bytes& x) {
  size_t first = a.size(), last = 0, count = 0;
  std::string some;  // the first few, as offset: a's byte/b's byte
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i] != b[i]) {
      first = std::min(first, i);
      last = i;
      if (++count <= 8) some += " " + std::to_string(i) + ":" + std::to_string(a[i]) + "/" + std::to_string(b[i]);
    }
  Header h{};
  if (b.size() >= sizeof h) memcpy(&h, b.data(), sizeof h);
  return std::to_string(count) + " bytes differ in [" + std::to_string(first) + ", " + std::to_string(last) +
         "] (" + some + " ); sections: table " + std::to_string(h.off_table) + ", residuals " + std::to_string(h.off_res) +
         ", planes " + std::to_string(h.off_bits) + ", escapes " + std::to_string(h.off_esc) + ", end " +
         std::to_string(b.size()) + "; a decodes to the input: " + decodes_to(a, x);
}

class GpuCodec : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    CUDA_OK(cudaStreamCreate(&stream_));
    temp_bytes_ = gpu::temp_bytes_bound(size_t(600) << 20, 1024);
    CUDA_OK(cudaMalloc(&temp_, temp_bytes_));
    CUDA_OK(gpu::init_temp(temp_, temp_bytes_, stream_));
  }
  void TearDown() override {
    if (temp_) cudaFree(temp_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Encode all inputs in one encode_batch call.
  void encode(const std::vector<In>& ins, std::vector<Out>* outs, const gpu::EncodeOptions& opt = {}) {
    const size_t n = ins.size();
    std::vector<size_t> in_off(n), out_off(n), caps(n);
    size_t in_total = 0, out_total = 0;
    for (size_t i = 0; i < n; ++i) {
      caps[i] = ins[i].cap == SIZE_MAX ? max_compressed_bytes(ins[i].data.size()) : ins[i].cap;
      in_off[i] = in_total + ins[i].in_shift;
      in_total = (in_off[i] + ins[i].data.size() + 255) / 256 * 256;
      out_off[i] = out_total + ins[i].out_shift;
      out_total = (out_off[i] + caps[i] + kGuard + 255) / 256 * 256;
    }
    uint8_t *din = nullptr, *dout = nullptr;
    CUDA_OK(cudaMalloc(&din, in_total + 1));
    CUDA_OK(cudaMalloc(&dout, out_total + 1));
    for (size_t i = 0; i < n; ++i)
      CUDA_OK(cudaMemcpy(din + in_off[i], ins[i].data.data(), ins[i].data.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dout, kCanary, out_total + 1));
    std::vector<gpu::EncodeItem> items(n);
    for (size_t i = 0; i < n; ++i) {
      items[i].in = din + in_off[i];
      items[i].bytes = ins[i].data.size();
      items[i].out = dout + out_off[i];
      items[i].out_cap = caps[i];
      items[i].codec = ins[i].codec;
      items[i].auto_codec = ins[i].auto_codec;
    }
    gpu::Result* res = nullptr;
    CUDA_OK(cudaMallocHost(&res, std::max<size_t>(n, 1) * sizeof(gpu::Result)));
    memset(res, 0, std::max<size_t>(n, 1) * sizeof(gpu::Result));
    CUDA_OK(gpu::encode_batch(items.data(), int(n), temp_, temp_bytes_, res, stream_, opt));
    CUDA_OK(cudaStreamSynchronize(stream_));
    Bytes host(out_total);
    CUDA_OK(cudaMemcpy(host.data(), dout, out_total, cudaMemcpyDeviceToHost));
    outs->assign(n, {});
    for (size_t i = 0; i < n; ++i) {
      (*outs)[i].r = res[i];
      EXPECT_EQ(res[i].done, 1) << "item " << i;
      // With raw_from_input only the header is in the output buffer.
      const size_t written = res[i].raw_from_input ? kHeaderBytes : res[i].bytes;
      ASSERT_LE(written, caps[i]);
      (*outs)[i].msg.assign(host.begin() + out_off[i], host.begin() + out_off[i] + written);
      for (size_t k = 0; k < kGuard; ++k)
        ASSERT_EQ(host[out_off[i] + caps[i] + k], kCanary) << "item " << i << " wrote past its capacity";
    }
    cudaFreeHost(res);
    cudaFree(din);
    cudaFree(dout);
  }

  struct Dec {
    Bytes msg;
    size_t in_bytes = SIZE_MAX;  // default msg.size()
    size_t out_cap = 0;
    size_t shift = 0;
  };

  void decode(const std::vector<Dec>& ds, std::vector<Out>* outs) {
    const size_t n = ds.size();
    std::vector<size_t> in_off(n), out_off(n);
    size_t in_total = 0, out_total = 0;
    for (size_t i = 0; i < n; ++i) {
      in_off[i] = in_total + ds[i].shift;
      in_total = (in_off[i] + ds[i].msg.size() + 255) / 256 * 256;
      out_off[i] = out_total + ds[i].shift;
      out_total = (out_off[i] + ds[i].out_cap + kGuard + 255) / 256 * 256;
    }
    uint8_t *din = nullptr, *dout = nullptr;
    CUDA_OK(cudaMalloc(&din, in_total + 1));
    CUDA_OK(cudaMalloc(&dout, out_total + 1));
    for (size_t i = 0; i < n; ++i)
      CUDA_OK(cudaMemcpy(din + in_off[i], ds[i].msg.data(), ds[i].msg.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dout, kCanary, out_total + 1));
    std::vector<gpu::DecodeItem> items(n);
    for (size_t i = 0; i < n; ++i) {
      items[i].in = din + in_off[i];
      items[i].in_bytes = ds[i].in_bytes == SIZE_MAX ? ds[i].msg.size() : ds[i].in_bytes;
      items[i].out = dout + out_off[i];
      items[i].out_cap = ds[i].out_cap;
    }
    gpu::Result* res = nullptr;
    CUDA_OK(cudaMallocHost(&res, std::max<size_t>(n, 1) * sizeof(gpu::Result)));
    memset(res, 0, std::max<size_t>(n, 1) * sizeof(gpu::Result));
    CUDA_OK(gpu::decode_batch(items.data(), int(n), temp_, temp_bytes_, res, stream_));
    CUDA_OK(cudaStreamSynchronize(stream_));
    Bytes host(out_total);
    CUDA_OK(cudaMemcpy(host.data(), dout, out_total, cudaMemcpyDeviceToHost));
    outs->assign(n, {});
    for (size_t i = 0; i < n; ++i) {
      (*outs)[i].r = res[i];
      EXPECT_EQ(res[i].done, 1) << "item " << i;
      ASSERT_LE(res[i].bytes, ds[i].out_cap);
      (*outs)[i].msg.assign(host.begin() + out_off[i], host.begin() + out_off[i] + res[i].bytes);
      for (size_t k = 0; k < kGuard; ++k)
        ASSERT_EQ(host[out_off[i] + ds[i].out_cap + k], kCanary)
            << "item " << i << " wrote past its capacity";
    }
    cudaFreeHost(res);
    cudaFree(din);
    cudaFree(dout);
  }

  // GPU encode == CPU encode, byte for byte; both decoders restore the input from it; the GPU
  // decoder restores the input from the CPU's message.
  void check_identical(const std::vector<In>& ins, const gpu::EncodeOptions& gopt = {}) {
    std::vector<Out> outs;
    ASSERT_NO_FATAL_FAILURE(encode(ins, &outs, gopt));
    EncodeOptions copt;
    copt.checksum = gopt.checksum;
    copt.max_ratio = gopt.max_ratio;
    std::vector<Dec> decs;
    std::vector<size_t> ok_items;
    for (size_t i = 0; i < ins.size(); ++i) {
      const Bytes& x = ins[i].data;
      const Codec c = ins[i].auto_codec ? classify(x.data(), x.size()) : ins[i].codec;
      const size_t cap = ins[i].cap == SIZE_MAX ? max_compressed_bytes(x.size()) : ins[i].cap;
      Bytes ref(std::max<size_t>(cap, 1));
      size_t ref_len = 0;
      const Status s = zipccl::encode(c, x.data(), x.size(), ref.data(), cap, &ref_len, copt);
      ASSERT_EQ(outs[i].r.status, int(s))
          << "item " << i << " size " << x.size() << " codec " << codec_name(c);
      if (s != Status::kOk) {
        EXPECT_EQ(outs[i].r.bytes, 0u);
        continue;
      }
      ref.resize(ref_len);
      ASSERT_EQ(outs[i].r.bytes, ref_len)
          << "item " << i << " size " << x.size() << " codec " << codec_name(c);
      ASSERT_EQ(outs[i].msg, ref) << "item " << i << " size " << x.size() << " codec " << codec_name(c) << ", "
                                  << differences(outs[i].msg, ref, x);
      ASSERT_EQ(outs[i].r.codec, ref[5]) << "item " << i;
      EXPECT_EQ(outs[i].r.raw_from_input, 0);
      Bytes back(x.size() + 1);
      size_t back_len = 0;
      ASSERT_EQ(zipccl::decode(outs[i].msg.data(), outs[i].msg.size(), back.data(), back.size(), &back_len),
                Status::kOk);
      ASSERT_EQ(back_len, x.size());
      ASSERT_EQ(memcmp(back.data(), x.data(), x.size()), 0);
      decs.push_back({ref, SIZE_MAX, x.size(), ins[i].in_shift});
      ok_items.push_back(i);
    }
    std::vector<Out> dec;
    ASSERT_NO_FATAL_FAILURE(decode(decs, &dec));
    for (size_t k = 0; k < decs.size(); ++k) {
      const Bytes& x = ins[ok_items[k]].data;
      ASSERT_EQ(dec[k].r.status, int(Status::kOk)) << "item " << ok_items[k];
      ASSERT_EQ(dec[k].r.bytes, x.size());
      ASSERT_EQ(dec[k].msg, x) << "item " << ok_items[k] << " size " << x.size();
    }
  }

  cudaStream_t stream_ = nullptr;
  void* temp_ = nullptr;
  size_t temp_bytes_ = 0;
};

In make_in(Bytes d, Codec c, bool a = false) {
  In x;
  x.data = std::move(d);
  x.codec = c;
  x.auto_codec = a;
  return x;
}

TEST_F(GpuCodec, AllBf16AndFp16Patterns) {
  for (Codec c : {Codec::BF16, Codec::FP16}) {
    Bytes seq(65536 * 2), shuffled, mixed = gaussian(c, 65536 * 2 * 4, 7);
    for (uint32_t i = 0; i < 65536; ++i) memcpy(&seq[2 * i], &i, 2);
    std::vector<uint16_t> perm(65536);
    for (uint32_t i = 0; i < 65536; ++i) perm[i] = uint16_t(i);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
    shuffled.resize(65536 * 2);
    memcpy(shuffled.data(), perm.data(), shuffled.size());
    // Every pattern inside Gaussian blocks: coded blocks with escapes of every exponent.
    for (uint32_t i = 0; i < 65536; ++i) memcpy(&mixed[8 * i], &perm[i], 2);
    check_identical({make_in(seq, c), make_in(shuffled, c), make_in(mixed, c), make_in(mixed, c, true)});
  }
}

TEST_F(GpuCodec, Fp32Specials) {
  const uint32_t specials[] = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
                               0x7F800001, 0x7FBFFFFF, 0x00000001, 0x807FFFFF, 0x00400000, 0x7F7FFFFF,
                               0xFF7FFFFF, 0x00800000, 0x3F800000, 0xBF800000};
  std::mt19937 g(5);
  std::vector<In> ins;
  for (double frac : {0.01, 0.3, 1.0}) {
    Bytes d = gaussian(Codec::FP32, 4 * 50000 + 3, 11);
    for (size_t i = 0; i + 4 <= d.size(); i += 4)
      if (std::uniform_real_distribution<double>(0, 1)(g) < frac) memcpy(&d[i], &specials[g() % 16], 4);
    ins.push_back(make_in(d, Codec::FP32));
    ins.push_back(make_in(d, Codec::FP32, true));
  }
  Bytes nan_payloads(4 * 4096 * 3);
  for (size_t i = 0; i < nan_payloads.size() / 4; ++i) {
    const uint32_t v = (i & 1 ? 0xFF800000u : 0x7F800000u) | (uint32_t(g()) & 0x7FFFFF) | 1;
    memcpy(&nan_payloads[4 * i], &v, 4);
  }
  ins.push_back(make_in(nan_payloads, Codec::FP32));
  Bytes denormals(4 * 9000);
  for (size_t i = 0; i < denormals.size() / 4; ++i) {
    const uint32_t v = (uint32_t(g()) & 0x807FFFFF);
    memcpy(&denormals[4 * i], &v, 4);
  }
  ins.push_back(make_in(denormals, Codec::FP32));
  ins.push_back(make_in(Bytes(4 * 10000, 0), Codec::FP32));
  ins.push_back(make_in(Bytes(4 * 10000, 0), Codec::BF16));
  check_identical(ins);
}

TEST_F(GpuCodec, SizesAcrossBlockBoundaries) {
  std::vector<size_t> sizes;
  for (size_t s = 0; s <= (quick() ? 40 : 300); ++s) sizes.push_back(s);
  for (size_t k = 1; k <= 2; ++k)
    for (int d = -9; d <= 9; ++d) {
      sizes.push_back(k * 8192 + d);
      sizes.push_back(k * 16384 + d);
    }
  std::mt19937 g(9);
  for (int i = 0; i < (quick() ? 20 : 400); ++i) sizes.push_back(g() % 20001);
  for (Codec c : {Codec::BF16, Codec::FP16, Codec::FP32, Codec::Raw}) {
    std::vector<In> ins;
    for (size_t s : sizes) {
      ins.push_back(make_in(gaussian(c == Codec::Raw ? Codec::BF16 : c, s, uint32_t(s)), c));
      ins.push_back(make_in(ins.back().data, c, true));
    }
    check_identical(ins);
  }
}

// Sizes where the coded layout with no escapes is exactly as large as the Raw message
// (format.h: 128 + n == off_esc): the CPU keeps the coded message on a tie.
TEST_F(GpuCodec, TiesWithRaw) {
  std::vector<In> ins;
  for (Codec c : {Codec::BF16, Codec::FP16, Codec::FP32})
    for (size_t n :
         {1024, 1152, 1792, 1920, 3328, 3456, 4864, 4992, 6400, 6528, 2048, 2432, 2816, 3200, 4352, 4736}) {
      for (size_t d : {size_t(0), size_t(1), size_t(2)}) {
        ins.push_back(make_in(escape_free(c, n - d, uint32_t(n)), c));
        ins.push_back(make_in(gaussian(c, n - d, uint32_t(n)), c));
      }
    }
  check_identical(ins);
  std::vector<Out> outs;
  encode({make_in(escape_free(Codec::BF16, 1024, 1), Codec::BF16)}, &outs);
  EXPECT_EQ(outs[0].r.codec, uint8_t(Codec::BF16)) << "a tie with Raw stays coded";
  EXPECT_EQ(outs[0].r.bytes, 1024u + kHeaderBytes);
}

TEST_F(GpuCodec, MisalignedPointers) {
  std::vector<In> ins;
  for (Codec c : {Codec::BF16, Codec::FP16, Codec::FP32})
    for (size_t shift = 0; shift < 16; ++shift) {
      In x = make_in(gaussian(c, 20000 + 2 * shift + 1, uint32_t(shift)), c);
      x.in_shift = shift;
      x.out_shift = (shift * 7) % 16;
      ins.push_back(x);
    }
  check_identical(ins);
  // Again in a bulk launch, with a misaligned 16 MiB item added: their tiles are staged by every
  // thread's copies instead of the bulk copy engine.
  In big = make_in(gaussian(Codec::BF16, size_t(16) << 20, 16), Codec::BF16);
  big.in_shift = 5;
  big.out_shift = 3;
  ins.push_back(big);
  check_identical(ins);
}

TEST_F(GpuCodec, RandomBytesAndAllEscapes) {
  const size_t n = quick() ? 40000 : 300000;
  Bytes all_escape(n);
  for (size_t i = 0; i + 2 <= n; i += 2) {  // exponents 0x10 and 0xF0: the window holds neither
    const uint16_t v = (i / 2) & 1 ? uint16_t(0x7800 | (i & 0x7F)) : uint16_t(0x0800 | (i & 0x7F));
    memcpy(&all_escape[i], &v, 2);
  }
  // Gaussian with some blocks of random bytes: coded and raw blocks in one message.
  Bytes patchy = gaussian(Codec::BF16, n, 4);
  Bytes noise = random_bytes(n, 8);
  for (size_t blk = 1; blk * 8192 < n; blk += 3)
    memcpy(&patchy[blk * 8192], &noise[blk * 8192], std::min<size_t>(8192, n - blk * 8192));
  std::vector<In> ins;
  for (Codec c : {Codec::BF16, Codec::FP16, Codec::FP32}) {
    ins.push_back(make_in(noise, c));
    ins.push_back(make_in(all_escape, c));
    ins.push_back(make_in(patchy, c));
  }
  ins.push_back(make_in(noise, Codec::BF16, true));
  check_identical(ins);

  // raw_header_only: the same Raw header, no payload copy, flagged.
  gpu::EncodeOptions opt;
  opt.raw_header_only = true;
  std::vector<Out> outs;
  In x = make_in(noise, Codec::BF16);
  x.cap = kHeaderBytes;
  encode({x, make_in(gaussian(Codec::BF16, n, 2), Codec::BF16)}, &outs, opt);
  Bytes ref(max_compressed_bytes(n));
  size_t len = 0;
  ASSERT_EQ(zipccl::encode(Codec::BF16, noise.data(), n, ref.data(), ref.size(), &len), Status::kOk);
  ASSERT_EQ(outs[0].r.status, int(Status::kOk));
  EXPECT_EQ(outs[0].r.raw_from_input, 1);
  EXPECT_EQ(outs[0].r.codec, uint8_t(Codec::Raw));
  ASSERT_EQ(outs[0].r.bytes, len);
  EXPECT_EQ(memcmp(outs[0].msg.data(), ref.data(), kHeaderBytes), 0);
  EXPECT_EQ(outs[1].r.raw_from_input, 0);
  EXPECT_EQ(outs[1].r.codec, uint8_t(Codec::BF16));
}

TEST_F(GpuCodec, OptionsAndCapacity) {
  const size_t n = 100000;
  const Bytes x = gaussian(Codec::BF16, n, 12);
  Bytes ref(max_compressed_bytes(n));
  size_t coded = 0;
  ASSERT_EQ(zipccl::encode(Codec::BF16, x.data(), n, ref.data(), ref.size(), &coded), Status::kOk);
  for (double ratio : {0.5, 0.69, 0.71, 0.9}) {
    gpu::EncodeOptions opt;
    opt.max_ratio = ratio;
    check_identical({make_in(x, Codec::BF16), make_in(gaussian(Codec::FP32, n, 13), Codec::FP32)}, opt);
  }
  // Capacities around the coded size, the layout's fixed part and the raw size.
  std::vector<In> ins;
  for (size_t cap : {size_t(0), size_t(100), size_t(128), coded - 1, coded, coded + 1, n, n + 127, n + 128}) {
    In in = make_in(x, Codec::BF16);
    in.cap = cap;
    ins.push_back(in);
    In rnd = make_in(random_bytes(n, 3), Codec::BF16);
    rnd.cap = cap;
    ins.push_back(rnd);
  }
  check_identical(ins);
  gpu::EncodeOptions opt;
  opt.checksum = true;
  check_identical(
      {make_in(x, Codec::BF16), make_in(random_bytes(5000, 1), Codec::FP16),
       make_in(gaussian(Codec::FP32, 3 * 65536 + 1, 3), Codec::FP32), make_in(Bytes(), Codec::BF16)},
      opt);
}

TEST_F(GpuCodec, AutoCodecMatchesClassify) {
  std::vector<In> ins;
  for (size_t n : {size_t(0), size_t(10), size_t(63), size_t(64), size_t(65), size_t(1000), size_t(2047),
                   size_t(2048), size_t(5000), size_t(8191), size_t(100003), size_t(1) << 20}) {
    ins.push_back(make_in(gaussian(Codec::BF16, n, 1), Codec::BF16, true));
    ins.push_back(make_in(gaussian(Codec::FP16, n, 2), Codec::BF16, true));
    ins.push_back(make_in(gaussian(Codec::FP32, n, 3), Codec::BF16, true));
    ins.push_back(make_in(random_bytes(n, 4), Codec::BF16, true));
    ins.push_back(make_in(Bytes(n, 0), Codec::BF16, true));
  }
  // The device's choice shows in the codec of the message: the CPU's, for classify()'s choice.
  // Twice: in a small launch, and with a 16 MiB item added, in a bulk launch (whose 32 KiB
  // tiles wait for tile 0's choice while staged as bf16).
  for (bool bulk : {false, true}) {
    if (bulk) ins.push_back(make_in(gaussian(Codec::FP16, size_t(16) << 20, 5), Codec::BF16, true));
    std::vector<Out> outs;
    encode(ins, &outs);
    size_t coded = 0;
    for (size_t i = 0; i < ins.size(); ++i) {
      const Bytes& x = ins[i].data;
      Bytes ref(max_compressed_bytes(x.size()));
      size_t len = 0;
      ASSERT_EQ(zipccl::encode(classify(x.data(), x.size()), x.data(), x.size(), ref.data(), ref.size(), &len),
                Status::kOk);
      EXPECT_EQ(outs[i].r.codec, ref[5]) << "item " << i << " size " << x.size() << (bulk ? " (bulk)" : "");
      coded += ref[5] != uint8_t(Codec::Raw);
    }
    EXPECT_GT(coded, ins.size() / 3) << "most Gaussian inputs are coded";
    check_identical(ins);
  }
}

TEST_F(GpuCodec, LargeBatchAndBulk) {
  std::vector<In> ins;
  std::mt19937 g(21);
  const Codec codecs[] = {Codec::BF16, Codec::FP16, Codec::FP32, Codec::Raw};
  for (int i = 0; i < (quick() ? 70 : 150); ++i)
    ins.push_back(make_in(gaussian(codecs[i % 3], g() % 70000, uint32_t(i)), codecs[i % 4], i % 5 == 0));
  check_identical(ins);
  const size_t big = quick() ? (size_t(8) << 20) : (size_t(64) << 20) + 6;
  check_identical({make_in(gaussian(Codec::BF16, big, 77, 1.0f, 0.001), Codec::BF16),
                   make_in(gaussian(Codec::FP32, big / 2 + 1, 78), Codec::FP32)});
  // Every codec through the bulk tiles (several blocks per tile, a partial last tile), auto
  // items, and tiles mixing raw and coded blocks: bf16 with a patch of random bytes every
  // 40 KiB (not a multiple of the tile), and random bytes alone (all raw, then a Raw message).
  Bytes patchy = gaussian(Codec::BF16, big / 4 + 2, 79);
  const Bytes noise = random_bytes(9000, 80);
  for (size_t at = 1000; at + noise.size() <= patchy.size(); at += 40 << 10)
    memcpy(&patchy[at], noise.data(), noise.size());
  check_identical({make_in(gaussian(Codec::FP16, big / 4 + 3, 81, 0.02f, 0.1), Codec::FP16),
                   make_in(gaussian(Codec::FP32, big / 8 + 5, 82), Codec::FP32, true),
                   make_in(gaussian(Codec::BF16, big / 8 + 1, 83), Codec::BF16, true), make_in(patchy, Codec::BF16),
                   make_in(random_bytes(big / 16 + 7, 84), Codec::BF16)});
  // Bulk tiles that leave their escape chunks in temp for the fixup kernel, in a message that
  // ends up over its limit (Raw) and in one that just fits.
  const Bytes bulk_bf16 = gaussian(Codec::BF16, (size_t(17) << 20) + 2, 85);
  for (double ratio : {0.69, 0.71}) {
    gpu::EncodeOptions opt;
    opt.max_ratio = ratio;
    check_identical({make_in(bulk_bf16, Codec::BF16)}, opt);
  }
  // A checksum in a bulk launch (computed by the item's finalizing CTA).
  gpu::EncodeOptions crc;
  crc.checksum = true;
  check_identical({make_in(bulk_bf16, Codec::BF16), make_in(random_bytes(5000, 87), Codec::FP16)}, crc);
  // Temp with room for the tiles' words but not for the bulk scratch: every tile looks back.
  const size_t full = temp_bytes_;
  temp_bytes_ = size_t(64) << 10;
  check_identical({make_in(bulk_bf16, Codec::BF16), make_in(gaussian(Codec::FP32, size_t(5) << 20, 86), Codec::FP32)});
  temp_bytes_ = full;
}

// Batches whose items all use one codec, none auto, run the encode kernels built for that codec
// (the other tests' batches mostly mix codecs or auto items): the adversarial inputs again, in
// a small launch and in a bulk one.
TEST_F(GpuCodec, SingleCodecBatches) {
  const size_t n = quick() ? 40000 : 200000;
  const Bytes noise = random_bytes(n, 31);
  Bytes patterns(65536 * 2);  // every 16-bit pattern (2-byte codecs), 32768 patterns (fp32)
  for (uint32_t i = 0; i < 65536; ++i) memcpy(&patterns[2 * i], &i, 2);
  for (Codec c : {Codec::BF16, Codec::FP16, Codec::FP32}) {
    std::vector<In> ins;
    for (size_t s : {size_t(0), size_t(1), size_t(3), size_t(4099), size_t(8192), size_t(16387), size_t(65542)})
      ins.push_back(make_in(gaussian(c, s, uint32_t(s)), c));
    ins.push_back(make_in(noise, c));  // raw blocks, then a Raw message
    ins.push_back(make_in(patterns, c));
    Bytes patchy = gaussian(c, n, 32);  // coded and raw blocks in one message
    for (size_t at = 8192; at + 8192 <= n; at += 3 * 8192) memcpy(&patchy[at], &noise[at], 8192);
    ins.push_back(make_in(patchy, c));
    ins.push_back(make_in(Bytes(n, 0), c));
    In shifted = make_in(gaussian(c, 20011, 33), c);
    shifted.in_shift = 3;
    shifted.out_shift = 5;
    ins.push_back(shifted);
    check_identical(ins);
    check_identical({make_in(gaussian(c, (size_t(17) << 20) + 6, 34, 1.0f), c), make_in(patchy, c)});
  }
}

// Every launch leaves its temp memory zeroed (gpu_codec.h's contract), the encoder's tile
// ticket counter included: after mixed small batches and a bulk batch, encode and decode.
TEST_F(GpuCodec, TempLeftZeroed) {
  std::vector<In> ins;
  const Codec codecs[] = {Codec::BF16, Codec::FP16, Codec::FP32, Codec::Raw};
  for (int i = 0; i < 12; ++i)
    ins.push_back(
        make_in(gaussian(codecs[i % 3], 1000 + 37000 * size_t(i), uint32_t(i)), codecs[i % 4], i % 5 == 0));
  check_identical(ins);
  const size_t big = quick() ? (size_t(17) << 20) : (size_t(40) << 20) + 2;
  check_identical(
      {make_in(gaussian(Codec::BF16, big, 91, 1.0f), Codec::BF16), make_in(random_bytes(70001, 92), Codec::BF16)});
  CUDA_OK(cudaStreamSynchronize(stream_));
  Bytes t(temp_bytes_);
  CUDA_OK(cudaMemcpy(t.data(), temp_, temp_bytes_, cudaMemcpyDeviceToHost));
  EXPECT_EQ(size_t(std::count(t.begin(), t.end(), uint8_t(0))), t.size());
}

// The same small-launch batch again and again: the item's last CTA must read every tile's
// results before any temp word is cleared (a missing barrier there gave a wrong size in a few
// percent of batches), and the decoder's checker tile must not race the data tiles.
TEST_F(GpuCodec, RepeatedBatches) {
  std::vector<In> ins;
  const Codec codecs[] = {Codec::BF16, Codec::FP16, Codec::FP32};
  for (int i = 0; i < 48; ++i)
    ins.push_back(make_in(gaussian(codecs[i % 3], 3000 + 6001 * size_t(i), uint32_t(300 + i)), codecs[i % 3]));
  for (int round = 0; round < (quick() ? 3 : 40); ++round) {
    SCOPED_TRACE(round);
    ASSERT_NO_FATAL_FAILURE(check_identical(ins));
  }
}

// temp_bytes() against what the launches require (a word per tile, the decoder's checker tile
// per item, launches of kMaxBatch items, bulk tiles): it always suffices, and for small decode
// launches, which need every word of it, one byte less is refused before anything is launched;
// temp_bytes_bound() covers temp_bytes(). Host-side only, so it runs without a GPU, where the
// launches themselves fail (elsewhere the other tests launch).
TEST(GpuTempSizing, MatchesTheLaunches) {
  int devices = 0;
  const bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  cudaGetLastError();
  void* const fake = reinterpret_cast<void*>(uintptr_t(1) << 20);  // never dereferenced
  gpu::Result* const res = static_cast<gpu::Result*>(fake);
  // The first kMaxBatch items are the largest: a refused batch is refused at its first launch.
  const std::vector<std::vector<size_t>> batches = {
      {0},
      {1},
      {8192},
      {8193, 100, 0},
      {size_t(512) << 10, size_t(512) << 10, 3},
      std::vector<size_t>(150, 20000),
      {size_t(40) << 20, 1000, 8191},
      {(size_t(17) << 20) + 5},
  };
  for (const auto& sizes : batches) {
    SCOPED_TRACE(testing::Message() << sizes.size() << " items, first " << sizes[0]);
    const size_t need = gpu::temp_bytes(sizes.data(), int(sizes.size()));
    size_t total = 0;
    for (size_t s : sizes) total += s;
    EXPECT_GE(gpu::temp_bytes_bound(total, int(sizes.size())), need);
    std::vector<gpu::EncodeItem> enc(sizes.size());
    std::vector<gpu::DecodeItem> dec(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      enc[i].in = dec[i].in = fake;
      enc[i].out = dec[i].out = fake;
      enc[i].bytes = dec[i].out_cap = sizes[i];
      enc[i].out_cap = max_compressed_bytes(sizes[i]);
      dec[i].in_bytes = kHeaderBytes;
    }
    const int n = int(sizes.size());
    if (total < (size_t(16) << 20)) {  // small launches: a tile per 8 KiB
      EXPECT_EQ(gpu::decode_batch(dec.data(), n, fake, need - 1, res, nullptr), cudaErrorInvalidValue);
    }
    if (!gpu) {
      EXPECT_NE(gpu::encode_batch(enc.data(), n, fake, need, res, nullptr), cudaErrorInvalidValue);
      EXPECT_NE(gpu::decode_batch(dec.data(), n, fake, need, res, nullptr), cudaErrorInvalidValue);
    }
  }
}

// Every mutation of valid messages: the GPU decoder returns the CPU decoder's status and
// writes nothing past its output capacity.
TEST_F(GpuCodec, CorruptedInputs) {
  std::vector<Bytes> bases;
  std::vector<size_t> orig;
  Bytes patchy = gaussian(Codec::BF16, 50001, 4);
  Bytes noise = random_bytes(50001, 8);
  memcpy(&patchy[8192], &noise[8192], 8192);
  Bytes fp16 = gaussian(Codec::FP16, 30001, 5, 0.02f, 0.1);
  for (auto [c, x] : {std::pair{Codec::BF16, patchy}, std::pair{Codec::FP16, fp16},
                      std::pair{Codec::FP32, gaussian(Codec::FP32, 40003, 6)},
                      std::pair{Codec::Raw, random_bytes(3000, 9)}, std::pair{Codec::BF16, Bytes(3, 1)}}) {
    Bytes m(max_compressed_bytes(x.size()));
    size_t len = 0;
    EncodeOptions o;
    o.checksum = bases.size() == 2;
    ASSERT_EQ(zipccl::encode(c, x.data(), x.size(), m.data(), m.size(), &len, o), Status::kOk);
    m.resize(len);
    bases.push_back(m);
    orig.push_back(x.size());
  }
  std::mt19937 g(31);
  std::vector<Dec> cases;
  for (size_t bi = 0; bi < bases.size(); ++bi) {
    const Bytes& m = bases[bi];
    Header h;
    memcpy(&h, m.data(), sizeof h);
    auto add = [&](Bytes x, size_t in_bytes, size_t cap) {
      cases.push_back({std::move(x), in_bytes, cap, 0});
    };
    add(m, SIZE_MAX, orig[bi]);
    add(m, SIZE_MAX, orig[bi] ? orig[bi] - 1 : 0);
    for (size_t cut : {size_t(0), size_t(1), size_t(127), m.size() / 2, m.size() - 1}) add(m, cut, orig[bi]);
    for (size_t i = 0; i < kHeaderBytes; ++i) {
      Bytes x = m;
      x[i] ^= uint8_t(1 + g() % 255);
      add(x, SIZE_MAX, orig[bi] + 64);
    }
    const size_t table_end = h.off_table + size_t(h.n_blocks) * kBlockEntryBytes;
    for (size_t i = h.off_table; i < table_end; ++i)
      for (uint8_t flip : {uint8_t(1), uint8_t(0x80), uint8_t(g() | 1)}) {
        Bytes x = m;
        x[i] ^= flip;
        add(x, SIZE_MAX, orig[bi]);
      }
    for (int k = 0; k < (quick() ? 30 : 300) && h.off_bits < h.off_esc; ++k) {
      Bytes x = m;
      x[h.off_bits + g() % (h.off_esc - h.off_bits)] ^= uint8_t(1u << (g() % 8));
      add(x, SIZE_MAX, orig[bi]);
    }
    for (int k = 0; k < 30 && h.esc_bytes && h.codec != uint8_t(Codec::Raw); ++k) {
      Bytes x = m;
      x[h.off_esc + g() % h.esc_bytes] = uint8_t(g() % 2 ? 0xFF : 32);
      add(x, SIZE_MAX, orig[bi]);
    }
    for (int k = 0; k < 20; ++k) {  // data bytes: only a checksum can notice
      Bytes x = m;
      x[h.off_res + g() % (m.size() - h.off_res)] ^= 0x40;
      add(x, SIZE_MAX, orig[bi]);
    }
  }
  // The GPU's status and output of case i against the CPU decoder's; true for an error.
  auto same_as_cpu = [&](size_t i, const Out& out, const char* launch) {
    const Dec& d = cases[i];
    const size_t in_bytes = d.in_bytes == SIZE_MAX ? d.msg.size() : d.in_bytes;
    Bytes ref(d.out_cap + 1);
    size_t len = 0;
    const Status s = zipccl::decode(d.msg.data(), in_bytes, ref.data(), d.out_cap, &len);
    EXPECT_EQ(out.r.status, int(s)) << launch << " case " << i << ": cpu says " << status_string(s);
    if (s == Status::kOk) {
      EXPECT_EQ(out.r.bytes, len) << launch << " case " << i;
      EXPECT_TRUE(out.msg.size() == len && memcmp(out.msg.data(), ref.data(), len) == 0) << launch << " case " << i;
    }
    return s != Status::kOk;
  };
  std::vector<Out> outs;
  decode(cases, &outs);
  size_t errors = 0;
  for (size_t i = 0; i < cases.size(); ++i) errors += same_as_cpu(i, outs[i], "small");
  EXPECT_GT(errors, cases.size() / 2) << "most mutations must be detected";
  printf("%zu corrupted cases, %zu errors, all statuses equal to the CPU's\n", cases.size(), errors);
  ASSERT_FALSE(HasFailure());
  // The same cases in bulk launches, whose tiles hold two blocks and whose results a second
  // kernel publishes: 63 cases and a valid 16 MiB message per launch (quick: every 8th group).
  const Bytes big = gaussian(Codec::BF16, size_t(16) << 20, 7);
  Bytes big_msg(max_compressed_bytes(big.size()));
  size_t big_len = 0;
  ASSERT_EQ(zipccl::encode(Codec::BF16, big.data(), big.size(), big_msg.data(), big_msg.size(), &big_len), Status::kOk);
  big_msg.resize(big_len);
  size_t bulk_cases = 0;
  for (size_t first = 0; first < cases.size(); first += quick() ? 8 * 63 : 63) {
    std::vector<Dec> batch(cases.begin() + first, cases.begin() + std::min(cases.size(), first + 63));
    batch.push_back({big_msg, SIZE_MAX, big.size(), 0});
    decode(batch, &outs);
    ASSERT_EQ(outs.back().r.status, int(Status::kOk));
    ASSERT_TRUE(outs.back().msg == big) << "the valid bulk message";
    for (size_t i = 0; i + 1 < batch.size(); ++i) same_as_cpu(first + i, outs[i], "bulk");
    ASSERT_FALSE(HasFailure());
    bulk_cases += batch.size() - 1;
  }
  printf("%zu of them in bulk launches, all statuses equal to the CPU's\n", bulk_cases);
}

TEST_F(GpuCodec, BadArguments) {
  gpu::EncodeItem e;
  gpu::Result r;
  void* out = nullptr;
  CUDA_OK(cudaMalloc(&out, 1 << 20));
  e.in = out;
  e.bytes = 1 << 19;
  e.out = out;
  e.out_cap = 1 << 20;
  EXPECT_EQ(gpu::encode_batch(&e, 1, temp_, 16, &r, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::encode_batch(&e, 1, nullptr, temp_bytes_, &r, stream_), cudaErrorInvalidValue);
  gpu::DecodeItem d;
  d.in = out;
  d.in_bytes = 1;
  d.out_cap = 10;
  EXPECT_EQ(gpu::decode_batch(&d, 1, temp_, temp_bytes_, &r, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::encode_batch(nullptr, 0, nullptr, 0, nullptr, stream_), cudaSuccess);
  // A bad item in the second launch of a batch: nothing is launched, no result published.
  std::vector<gpu::EncodeItem> many(gpu::kMaxBatch + 6);
  for (auto& x : many) {
    x.in = out;
    x.bytes = 1024;
    x.out = static_cast<uint8_t*>(out) + (1 << 19);
    x.out_cap = 4096;
  }
  many.back().out = nullptr;
  gpu::Result* res = nullptr;
  CUDA_OK(cudaMallocHost(&res, many.size() * sizeof(gpu::Result)));
  memset(res, 0, many.size() * sizeof(gpu::Result));
  EXPECT_EQ(gpu::encode_batch(many.data(), int(many.size()), temp_, temp_bytes_, res, stream_), cudaErrorInvalidValue);
  CUDA_OK(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < many.size(); ++i) EXPECT_EQ(res[i].done, 0) << "item " << i;
  cudaFreeHost(res);
  cudaFree(out);
  // temp is still as init_temp() left it.
  check_identical({make_in(gaussian(Codec::BF16, 10000, 3), Codec::BF16)});
}

// Real training tensors: the GPU's messages equal the CPU's, so the ratio is identical.
TEST_F(GpuCodec, TrainingTensors) {
  const char* dir = std::getenv("ZIPCCL_DATA_DIR");
  if (!dir) GTEST_SKIP() << "ZIPCCL_DATA_DIR not set";
  size_t files = 0;
  for (const char* name : {"weights_bf16", "grads_bf16", "grads_fp32", "acts_bf16"}) {
    std::ifstream f(std::string(dir) + "/" + name + ".safetensors", std::ios::binary);
    if (!f) continue;
    ++files;
    Bytes file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    uint64_t hlen;
    memcpy(&hlen, file.data(), 8);
    const std::string json(file.begin() + 8, file.begin() + 8 + hlen);
    std::vector<In> ins;
    // Each tensor: "dtype":"BF16","shape":[..],"data_offsets":[a,b]
    for (size_t p = json.find("\"dtype\""); p != std::string::npos; p = json.find("\"dtype\"", p + 1)) {
      const size_t q = json.find('"', json.find(':', p) + 1) + 1;
      const std::string dtype = json.substr(q, json.find('"', q) - q);
      const size_t o = json.find('[', json.find("data_offsets", p)) + 1;
      const size_t a = std::stoull(json.substr(o)), b = std::stoull(json.substr(json.find(',', o) + 1));
      const Codec c = dtype == "BF16"  ? Codec::BF16
                      : dtype == "F16" ? Codec::FP16
                      : dtype == "F32" ? Codec::FP32
                                       : Codec::Raw;
      Bytes t(file.begin() + 8 + hlen + a, file.begin() + 8 + hlen + b);
      ins.push_back(make_in(t, c));
      ins.push_back(make_in(t, c, true));
    }
    ASSERT_FALSE(ins.empty()) << name;
    check_identical(ins);
    std::vector<Out> outs;
    encode(ins, &outs);
    size_t in_total = 0, out_total = 0;
    for (size_t i = 0; i < ins.size(); i += 2) {
      in_total += ins[i].data.size();
      out_total += outs[i].r.bytes;
    }
    printf("%s: %zu tensors, GPU ratio %.4f (identical to CPU)\n", name, ins.size() / 2,
           double(out_total) / in_total);
  }
  if (files == 0) GTEST_SKIP() << "no safetensors files in " << dir;
}

}  // namespace
