// GPU decoder: one CTA per tile of 1 or 2 blocks (tiling.cuh), and one more per item that
// checks its header. The input is untrusted and is validated with the CPU decoder's checks
// (header.cc, decode.cc): the header against the layout it implies (by the checker CTA), each
// block's entry, the tiling of the escape section (entry b must start where entry b-1 ends; the
// last must end at esc_bytes), and the escape count against the code-0 entries before any
// escape byte is read. Data tiles do not wait for the header check: they decode from the
// header's claimed layout only when it keeps every read within the bytes received and every
// write within the output capacity (as a valid header's layout does), and the checker's error
// ranks first. Errors are ordered (header, block 0, block 1, ..., final tiling) and the first
// one is reported, so the status equals the CPU's; on an error the output is unspecified.
//
// This file holds the kernels, the item's finish and the launcher; a data tile's decoding is
// decode_tile.cuh's, the header and error checks decode_check.cuh's. Those headers are this
// file's alone: their unnamed namespaces keep every symbol internal to it.
#include <algorithm>

#include "decode_body.cuh"
#include "launch.cuh"
#include "trace.cuh"

namespace zipccl::gpu {
namespace detail {
namespace {

// Bulk launches: 8 CTAs (64 warps) per SM at 32 registers, which hides more of a tile's two
// round trips than 6 at 40 (a few dozen bytes of spills against none; 64 MiB bf16 +5%, 256 MiB
// +6.5%); as many as fit where an SM holds 1536 threads (sm_86, sm_87, sm_89: 6, where a bound
// of 8 was out of range and ptxas ignored it with a warning).
// Small launches have a CTA or two per SM and keep 40 registers.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890)
constexpr int kSmThreads = 1536;
#else
constexpr int kSmThreads = 2048;
#endif
template <int MU>
__global__ void __launch_bounds__(kThreads, MU > 1 ? kSmThreads / kThreads : 6)
    decode_kernel(const __grid_constant__ Launch P) {
  __shared__ DecShared sh;
  extern __shared__ __align__(128) uint4 staged[];  // (see encode_body.cuh's g_staged)
  ZIPCCL_MARK_TIME(12);
  ZIPCCL_MARK(0);
  if (MU > 1) allow_dependents();  // decode_finish_kernel may launch once the last tiles run
  init_shared(sh);
  const int item = find_item(P);
  decode_tile<MU>(P, item, blockIdx.x - P.items[item].tile0, sh, staged);
  ZIPCCL_MARK(10);
  ZIPCCL_MARK_TIME(13);
}

// Bulk launches: one CTA per item publishes its result once the decode kernel has finished.
__global__ void __launch_bounds__(kThreads) decode_finish_kernel(const __grid_constant__ Launch P) {
  __shared__ DecShared sh;
  grid_dependency_wait();
  const int item = blockIdx.x;
  const LaunchItem& it = P.items[item];
  if (threadIdx.x < kHeaderBytes)
    reinterpret_cast<uint8_t*>(&sh.header)[threadIdx.x] = header_byte(it, threadIdx.x);
  __syncthreads();
  finalize(P, item, sh);
}

}  // namespace
}  // namespace detail

#ifdef ZIPCCL_GPU_TRACE
cudaError_t read_decode_trace(unsigned long long (*out)[kTraceSlots]) {
  return cudaMemcpyFromSymbol(out, detail::g_trace, sizeof detail::g_trace);
}
#endif

cudaError_t decode_batch(const DecodeItem* items, int n, void* temp, size_t temp_size, Result* results,
                         cudaStream_t stream) {
  using namespace detail;
  if (n < 0 || (n > 0 && (!items || !temp || !results))) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i)  // all before the first launch (see launch_error())
    if ((items[i].in_bytes && !items[i].in) || (items[i].out_cap && !items[i].out)) return cudaErrorInvalidValue;
  bool queued = false;
  for (int first = 0; first < n; first += kMaxBatch) {
    const int m = std::min(n - first, kMaxBatch);
    Launch P{};
    for (int i = 0; i < m; ++i) {
      const DecodeItem& d = items[first + i];
      LaunchItem& l = P.items[i];
      l.in = static_cast<const uint8_t*>(d.in);
      l.out = static_cast<uint8_t*>(d.out);
      l.bytes = d.in_bytes;
      l.cap = d.out_cap;
    }
    bool bulk;
    const uint32_t tiles =
        finish_launch(P, m, &LaunchItem::cap, kDecodeBulkMU, 1, 0, temp, temp_size, results + first, &bulk);
    if (tiles == 0) return launch_error(cudaErrorInvalidValue, queued, temp, temp_size, stream);
    if (bulk)
      decode_kernel<kDecodeBulkMU><<<tiles, kThreads, decode_stage_bytes<kDecodeBulkMU>(), stream>>>(P);
    else
      decode_kernel<1><<<tiles, kThreads, decode_stage_bytes<1>(), stream>>>(P);
    cudaError_t err = cudaGetLastError();
    queued |= err == cudaSuccess;
    if (bulk && err == cudaSuccess) err = launch_after(decode_finish_kernel, m, kThreads, stream, P);
    if (err != cudaSuccess) return launch_error(err, queued, temp, temp_size, stream);
  }
  return cudaSuccess;
}

}  // namespace zipccl::gpu
