// The GPUs and the GPU codec's self-test (builds with CUDA).
#include <cuda_runtime.h>
#include <stdlib.h>

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "probes.h"
#include "zipccl/codec.h"
#include "zipccl/gpu_codec.h"

namespace zipccl::doctor {
namespace {

// bf16 values as gradients look: N(0, 0.02^2)-like exponents, random mantissas, some zeros; plus
// every one of the 65,536 bit patterns once.
std::vector<uint8_t> test_data(size_t n) {
  std::vector<uint8_t> d(n);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 1 < n; i += 2) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    uint16_t v = (i / 2 < 65536) ? uint16_t(i / 2)
                                 : uint16_t((x & 0x807F) | ((118 + (x >> 8) % 8) << 7));  // sign, mantissa, exponent
    if ((x >> 20) % 64 == 0) v = 0;
    std::memcpy(&d[i], &v, 2);
  }
  return d;
}

// One encode and one decode launch on the current device, against the CPU codec. Empty on
// success, else what went wrong.
std::string self_test() {
  const std::vector<uint8_t> in = test_data((size_t(1) << 20) + 6);
  const size_t cap = max_compressed_bytes(in.size());
  std::vector<uint8_t> cpu(cap), msg(cap), back(in.size());
  size_t cpu_len = 0;
  if (encode(Codec::BF16, in.data(), in.size(), cpu.data(), cpu.size(), &cpu_len) != Status::kOk)
    return "the CPU codec failed";
  void *d_in = nullptr, *d_msg = nullptr, *d_out = nullptr, *temp = nullptr;
  gpu::Result* res = nullptr;
  const size_t sizes[1] = {in.size()};
  const size_t temp_bytes = gpu::temp_bytes(sizes, 1);
  std::string err;
  auto ck = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && err.empty()) err = std::string(what) + ": " + cudaGetErrorString(e);
    return e == cudaSuccess;
  };
  if (ck(cudaMalloc(&d_in, in.size()), "cudaMalloc") && ck(cudaMalloc(&d_msg, cap), "cudaMalloc") &&
      ck(cudaMalloc(&d_out, in.size()), "cudaMalloc") && ck(cudaMalloc(&temp, temp_bytes), "cudaMalloc") &&
      ck(cudaMalloc(reinterpret_cast<void**>(&res), 2 * sizeof(gpu::Result)), "cudaMalloc") &&
      ck(cudaMemcpy(d_in, in.data(), in.size(), cudaMemcpyHostToDevice), "copy") &&
      ck(gpu::init_temp(temp, temp_bytes, nullptr), "init_temp")) {
    gpu::EncodeItem e;
    e.in = d_in, e.bytes = in.size(), e.out = d_msg, e.out_cap = cap, e.codec = Codec::BF16;
    gpu::Result r[2] = {};
    if (ck(gpu::encode_batch(&e, 1, temp, temp_bytes, res, nullptr), "encode_batch") &&
        ck(cudaMemcpy(&r[0], res, sizeof r[0], cudaMemcpyDeviceToHost), "encode result")) {
      if (r[0].status != int(Status::kOk) || r[0].bytes != cpu_len) {
        err = "encode: status " + std::to_string(r[0].status) + ", " + std::to_string(r[0].bytes) + " bytes (CPU: " +
              std::to_string(cpu_len) + ")";
      } else if (ck(cudaMemcpy(msg.data(), d_msg, cpu_len, cudaMemcpyDeviceToHost), "copy") &&
                 std::memcmp(msg.data(), cpu.data(), cpu_len) != 0) {
        err = "encode: the message differs from the CPU codec's";
      } else {
        gpu::DecodeItem dd;
        dd.in = d_msg, dd.in_bytes = cpu_len, dd.out = d_out, dd.out_cap = in.size();
        if (ck(gpu::decode_batch(&dd, 1, temp, temp_bytes, res + 1, nullptr), "decode_batch") &&
            ck(cudaMemcpy(&r[1], res + 1, sizeof r[1], cudaMemcpyDeviceToHost), "decode result") &&
            ck(cudaMemcpy(back.data(), d_out, in.size(), cudaMemcpyDeviceToHost), "copy")) {
          if (r[1].status != int(Status::kOk) || r[1].bytes != in.size() || back != in)
            err = "decode: status " + std::to_string(r[1].status) + ", the bytes differ from the input";
        }
      }
    }
  }
  for (void* p : {d_in, d_msg, d_out, temp, static_cast<void*>(res)}) cudaFree(p);
  return err;
}

}  // namespace

std::vector<Gpu> probe_gpus(Report* r) {
  std::vector<Gpu> gpus;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    r->add("gpu", Level::kInfo, std::string("no CUDA device") + (e != cudaSuccess ? std::string(": ") + cudaGetErrorString(e) : ""));
    return gpus;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p;
    char bus[32] = {};
    int gdr = 0;
    cudaGetDeviceProperties(&p, i);
    cudaDeviceGetPCIBusId(bus, sizeof bus, i);
    cudaDeviceGetAttribute(&gdr, cudaDevAttrGPUDirectRDMASupported, i);
    std::string id = bus;
    for (char& c : id) c = char(std::tolower(static_cast<unsigned char>(c)));
    char real[4096];
    const std::string sys = "/sys/bus/pci/devices/" + id;
    gpus.push_back({i, p.name, realpath(sys.c_str(), real) ? std::string(real) : std::string()});
    r->add("gpu", Level::kOk, "GPU " + std::to_string(i) + ": " + p.name + " at " + id +
                                  (gdr ? ", GPUDirect RDMA supported" : ", no GPUDirect RDMA"));
    cudaSetDevice(i);
    const std::string err = self_test();
    r->add("codec", err.empty() ? Level::kOk : Level::kFail,
           "GPU " + std::to_string(i) + " codec self-test (1 MiB bf16, every bit pattern, encode + decode): " +
               (err.empty() ? std::string("byte-identical to the CPU codec, round trip exact") : err));
  }
  return gpus;
}

}  // namespace zipccl::doctor
