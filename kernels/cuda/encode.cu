// GPU encoder: one CTA per tile of 1 to 4 blocks (tiling.cuh), one pass over the input. The
// only serial dependency of the format, each block's offset in the escape section, comes from
// a single-pass decoupled look-back scan (Merrill & Garland) over per-tile escape bytes: a tile
// publishes its escape bytes as soon as it has counted them, with its residual and bit-plane
// bytes already written, then resolves its offset and writes its block entries and escape
// chunks. In small launches the CTA that completes an item last publishes the size (after
// falling back to a Raw message where the CPU does) and the header comes from the tile with the
// last block; bulk launches leave the header, padding, fallback and result to a second kernel.
//
// This file holds the kernels and their launcher. What a tile runs, in order: the codec choice
// of an auto item (encode_classify.cuh), the item's plan (encode_plan.cuh), the tile's coding
// (encode_tile.cuh, with encode_window.cuh for the blocks' window bases and encode_lookback.cuh
// for its escape offset), then the item's finish (encode_finish.cuh, with encode_frame.cuh for
// the header and padding); bulk launches place deferred escape chunks in between
// (encode_fixup.cuh). Those headers are this file's alone: their unnamed namespaces keep every
// symbol internal to it.
#include <algorithm>
#include <type_traits>

#include "encode_body.cuh"
#include "encode_fixup.cuh"
#include "launch.cuh"
#include "tiling.cuh"
#include "trace.cuh"

namespace zipccl::gpu {
namespace detail {
namespace {

template <int MU, int FIXED>
__global__ void __launch_bounds__(encode_threads(MU, FIXED), 6) encode_kernel(const __grid_constant__ Launch P) {
  ZIPCCL_MARK_TIME(12);
  ZIPCCL_MARK(0);
  if (MU > 1) allow_dependents();  // the follow-up kernels may launch once the last tiles run
  const int item = find_item(P);
  encode_tile<MU, FIXED>(P, item, blockIdx.x - P.items[item].tile0);
  ZIPCCL_MARK(10);
  ZIPCCL_MARK_TIME(13);
}

// The encode kernel for a launch whose items all use codec `fixed` (kAnyCodec: mixed or auto).
template <int MU>
void (*encode_kernel_for(int fixed))(Launch) {
  switch (fixed) {
    case static_cast<int>(Codec::BF16):
      return encode_kernel<MU, static_cast<int>(Codec::BF16)>;
    case static_cast<int>(Codec::FP16):
      return encode_kernel<MU, static_cast<int>(Codec::FP16)>;
    case static_cast<int>(Codec::FP32):
      return encode_kernel<MU, static_cast<int>(Codec::FP32)>;
    default:
      return encode_kernel<MU, kAnyCodec>;
  }
}

// Bulk launches, after encode_kernel: the deferred tiles' escape chunks (encode_fixup.cuh).
template <int MU>
__global__ void __launch_bounds__(32 * kFixupWarps) encode_fixup_kernel(const __grid_constant__ Launch P) {
  grid_dependency_wait();
  allow_dependents();  // after the wait: encode_finish_kernel starts once the encode kernel has finished
  if (!P.scratch) return;  // no tile deferred
  place_deferred_tile<MU>(P);
}

// Bulk launches: one CTA per item finalizes it. It starts once the encode kernel has finished
// (encode_fixup_kernel lets it launch only then) and overlaps the fixup kernel (finalize()).
template <int MU>
__global__ void __launch_bounds__(kThreads) encode_finish_kernel(const __grid_constant__ Launch P) {
  __shared__ EncShared sh;
  const int item = blockIdx.x;
  const LaunchItem& it = P.items[item];
  if (threadIdx.x == 0)
    sh.plan = finished_plan(P, item);
  __syncthreads();
  finalize<MU>(P, item, sh.plan, P.state + it.tile0, sh);
}

}  // namespace
}  // namespace detail

#ifdef ZIPCCL_GPU_TRACE
cudaError_t read_encode_trace(unsigned long long (*out)[kTraceSlots]) {
  return cudaMemcpyFromSymbol(out, detail::g_trace, sizeof detail::g_trace);
}
#endif

cudaError_t encode_batch(const EncodeItem* items, int n, void* temp, size_t temp_size, Result* results,
                         cudaStream_t stream, const EncodeOptions& opt) {
  using namespace detail;
  if (n < 0 || (n > 0 && (!items || !temp || !results))) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i)  // all before the first launch (see launch_error())
    if ((items[i].bytes && !items[i].in) || !items[i].out || static_cast<uint8_t>(items[i].codec) >= kNumCodecs)
      return cudaErrorInvalidValue;
  bool queued = false;
  for (int first = 0; first < n; first += kMaxBatch) {
    const int m = std::min(n - first, kMaxBatch);
    Launch P{};
    P.checksum = opt.checksum;
    P.raw_header_only = opt.raw_header_only;
    for (int i = 0; i < m; ++i) {
      const EncodeItem& e = items[first + i];
      LaunchItem& l = P.items[i];
      l.in = static_cast<const uint8_t*>(e.in);
      l.out = static_cast<uint8_t*>(e.out);
      l.bytes = e.bytes;
      l.cap = e.out_cap;
      l.limit = coded_limit(e.bytes, opt.max_ratio);  // the CPU encoder's limit
      l.codec = static_cast<uint8_t>(e.codec);
      l.auto_codec = e.auto_codec;
    }
    int fixed = m > 0 && !P.items[0].auto_codec && P.items[0].codec != static_cast<uint8_t>(Codec::Raw)
                    ? P.items[0].codec
                    : kAnyCodec;
    for (int i = 1; i < m; ++i)
      if (P.items[i].auto_codec || P.items[i].codec != P.items[0].codec) fixed = kAnyCodec;
    bool bulk;
    const uint32_t tiles =
        finish_launch(P, m, &LaunchItem::bytes, kEncodeBulkMU, 0, kEscScratch, temp, temp_size, results + first, &bulk);
    if (tiles == 0) return launch_error(cudaErrorInvalidValue, queued, temp, temp_size, stream);
    // Dynamic shared memory: one staged unit (MU bf16/fp16 blocks or MU/2, at least one, fp32
    // blocks).
    if (bulk)
      encode_kernel_for<kEncodeBulkMU>(fixed)<<<tiles, encode_threads(kEncodeBulkMU, fixed), tile_bytes<kEncodeBulkMU>(),
                                               stream>>>(P);
    else
      encode_kernel_for<1>(fixed)<<<tiles, kThreads, 4 * kBlockElems, stream>>>(P);
    cudaError_t err = cudaGetLastError();
    queued |= err == cudaSuccess;
    if (bulk && err == cudaSuccess)
      err = launch_after(encode_fixup_kernel<kEncodeBulkMU>, (tiles + kFixupWarps - 1) / kFixupWarps, 32 * kFixupWarps,
                         stream, P);
    if (bulk && err == cudaSuccess) err = launch_after(encode_finish_kernel<kEncodeBulkMU>, m, kThreads, stream, P);
    if (err != cudaSuccess) return launch_error(err, queued, temp, temp_size, stream);
  }
  return cudaSuccess;
}

}  // namespace zipccl::gpu
