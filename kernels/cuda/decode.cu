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

#include "crc32c.cuh"
#include "cta.cuh"
#include "decode_check.cuh"
#include "decode_shared.cuh"
#include "decode_tile.cuh"
#include "launch.cuh"
#include "tiling.cuh"
#include "trace.cuh"

namespace zipccl::gpu {
namespace detail {
namespace {

// Without a reported error the header passed the checker tile's check, so its fields are the
// message's.
__device__ void finalize(const Launch& P, int item, DecShared& sh) {
  const LaunchItem& it = P.items[item];
  const uint32_t err = P.item_err[item];
  __syncthreads();  // every thread has read the error word before thread 0 clears it
  Status s = err ? static_cast<Status>(~err & 15) : Status::kOk;
  const uint64_t orig = sh.header.orig_bytes;
  if (s == Status::kOk && (sh.header.flags & kFlagChecksum) && cta_crc32c(it.out, orig, sh.crc) != sh.header.checksum)
    s = Status::kBadChecksum;
  if (threadIdx.x == 0) {
    P.item_err[item] = 0;
    P.item_done[item] = 0;
    publish_result(P, item, orig, s, err ? Codec::Raw : static_cast<Codec>(sh.header.codec), false);
  }
}

// Bulk launches: 8 CTAs (64 warps) per SM at 32 registers, which hides more of a tile's two
// round trips than 6 at 40 (a few dozen bytes of spills against none; 64 MiB bf16 +5%, 256 MiB
// +6.5%).
// Small launches have a CTA or two per SM and keep 40 registers.
template <int MU>
__global__ void __launch_bounds__(kThreads, MU > 1 ? 8 : 6) decode_kernel(const __grid_constant__ Launch P) {
  __shared__ DecShared sh;
  extern __shared__ __align__(128) uint4 staged[];  // (see encode.cu's g_staged)
  ZIPCCL_MARK_TIME(12);
  ZIPCCL_MARK(0);
  if (MU > 1) allow_dependents();  // decode_finish_kernel may launch once the last tiles run
  const int item = find_item(P);
  const LaunchItem& it = P.items[item];
  const uint32_t b = blockIdx.x - it.tile0;
  const bool checker = b == it.tiles - 1;  // the item's last tile checks its header
  // The header and the block entries of this tile (and the one before it, for the tiling
  // check) in one round trip: the table of a coded message starts at byte 128 whatever its
  // codec, so the entries of both tile shapes are read before the codec is known (the same
  // blocks when MU = 1). Reads stay within the bytes received; entries past the table are
  // never used.
  if (threadIdx.x < kHeaderBytes) {
    reinterpret_cast<uint8_t*>(&sh.header)[threadIdx.x] = header_byte(it, threadIdx.x);
  } else if (threadIdx.x < kHeaderBytes + 2 * (kMaxUnitBlocks + 1)) {
    const uint32_t j = threadIdx.x - kHeaderBytes, shape = j / (kMaxUnitBlocks + 1), m = j % (kMaxUnitBlocks + 1);
    const uint32_t M = shape == 0 ? MU : unit_blocks<Codec::FP32, MU>();
    const int64_t blk = int64_t(b) * M - 1 + m;
    BlockEntry e{};
    if (m <= M && blk >= 0 && kHeaderBytes + uint64_t(blk + 1) * kBlockEntryBytes <= it.bytes)
      e = load_entry(it.in + kHeaderBytes + uint64_t(blk) * kBlockEntryBytes);
    sh.entry[shape][m] = e;
  }
  __syncthreads();
  ZIPCCL_MARK(1);
  const Codec claimed = static_cast<Codec>(sh.header.codec);
  const uint32_t M = tile_blocks<MU>(claimed);
  if (checker) {
    if (threadIdx.x == 0) check(P, item, true, sh);
    __syncthreads();
    const Layout& L = sh.L;  // the tail bytes travel in the header
    if (static_cast<Status>(sh.status) == Status::kOk && L.codec != Codec::Raw && threadIdx.x < L.tail_bytes)
      it.out[L.n_elems * L.g.elem_bytes + threadIdx.x] = sh.header.tail[threadIdx.x];
  } else if (claimed != Codec::Raw && static_cast<uint8_t>(claimed) < kNumCodecs &&
             b * uint64_t(M) < sh.header.n_blocks) {
    switch (claimed) {
      case Codec::BF16:
        decode_unit<Codec::BF16, MU>(P, item, it, b, sh, staged);
        break;
      case Codec::FP16:
        decode_unit<Codec::FP16, MU>(P, item, it, b, sh, staged);
        break;
      default:
        decode_unit<Codec::FP32, MU>(P, item, it, b, sh, staged);
        break;
    }
  } else if (claimed == Codec::Raw) {  // a slice of the payload, once the header is checked
    if (threadIdx.x == 0) check(P, item, false, sh);
    __syncthreads();
    const Layout& L = sh.L;
    if (static_cast<Status>(sh.status) == Status::kOk) {
      const uint32_t data_tiles = it.tiles - 1;
      const uint64_t span = ((L.orig_bytes + data_tiles - 1) / data_tiles + 15) & ~uint64_t(15);
      const uint64_t lo = min(uint64_t(b) * span, L.orig_bytes);
      cta_copy(it.out + lo, it.in + kHeaderBytes + lo, min(span, L.orig_bytes - lo));
    }
  }
  ZIPCCL_MARK(6);  // (slot 7 is the encoder's)
  ZIPCCL_MARK(8);
  // Small launches: the item's last tile publishes (bulk ones: decode_finish_kernel); slot 9
  // follows slot 8 at once in bulk ones.
  bool last = false;
  if (MU == 1) last = finish_tile(P, item, &sh.flag);
  ZIPCCL_MARK(9);
  if (last) finalize(P, item, sh);
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
