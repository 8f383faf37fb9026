// What the resident codec's benchmarks feed it: buffers in device or mapped pinned host memory,
// a job per op as the plugin posts them, and data with its CPU-encoded message.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "bench_util.h"
#include "zipccl/codec.h"
#include "zipccl/service_protocol.h"

namespace zipccl::bench {

struct Buf {
  uint8_t* p = nullptr;
  bool host;
  Buf(size_t n, bool in_host) : host(in_host) {
    if (host)
      CK(cudaHostAlloc(reinterpret_cast<void**>(&p), n, cudaHostAllocMapped));
    else
      CK(cudaMalloc(reinterpret_cast<void**>(&p), n));
  }
  ~Buf() { host ? cudaFreeHost(p) : cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

enum Op { kFloor, kEncode, kDecode };

inline gpu::ServiceJob job(Op op, const void* in, uint64_t in_bytes, void* out, uint64_t n, bool in_host) {
  gpu::ServiceJob j{};
  j.in = in;
  j.in_bytes = in_bytes;
  j.out = out;
  if (op == kDecode) {
    j.op = gpu::kServiceDecode;
    j.out_cap = n;
    j.in_host = in_host;
  } else {
    j.op = gpu::kServiceEncode;
    j.out_cap = max_compressed_bytes(n);
    j.limit = coded_limit(n, 1.0);
    j.codec = static_cast<uint8_t>(op == kFloor ? Codec::Raw : Codec::BF16);
  }
  return j;
}

// Data, its message (the CPU encoder's) and an output buffer, all in the given memory: the
// input of every op.
struct Data {
  Buf src, msg, out;
  uint64_t n, msg_bytes = 0;
  Data(const uint8_t* x, size_t bytes, bool host)
      : src(bytes, host), msg(max_compressed_bytes(bytes), host), out(max_compressed_bytes(bytes), host), n(bytes) {
    std::vector<uint8_t> m(max_compressed_bytes(n));
    size_t len = 0;
    if (zipccl::encode(Codec::BF16, x, n, m.data(), m.size(), &len) != Status::kOk) exit(1);
    msg_bytes = len;
    CK(cudaMemcpy(src.p, x, n, cudaMemcpyDefault));
    CK(cudaMemcpy(msg.p, m.data(), len, cudaMemcpyDefault));
    CK(cudaStreamSynchronize(nullptr));  // pageable copies may return before their DMA lands
  }
  gpu::ServiceJob for_op(Op op) {
    return op == kDecode ? job(op, msg.p, msg_bytes, out.p, n, msg.host) : job(op, src.p, n, out.p, n, src.host);
  }
};

}  // namespace zipccl::bench
