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

#include "encode_classify.cuh"
#include "encode_finish.cuh"
#include "encode_fixup.cuh"
#include "encode_plan.cuh"
#include "encode_shared.cuh"
#include "encode_tile.cuh"
#include "launch.cuh"
#include "tiling.cuh"
#include "trace.cuh"

namespace zipccl::gpu {
namespace detail {
namespace {

// The slice of a Raw message's payload that tile b copies.
__device__ __forceinline__ void raw_slice(const LaunchItem& it, uint32_t b, uint64_t* lo, uint64_t* len) {
  const uint64_t span = ((it.bytes + it.tiles - 1) / it.tiles + 15) & ~uint64_t(15);
  *lo = min(uint64_t(b) * span, it.bytes);
  *len = min(span, it.bytes - *lo);
}

// The encode kernel's shared memory at namespace scope, so that encode_unit_apart() reaches it
// as shared memory (through a parameter it would be a generic pointer).
__shared__ EncShared g_sh;
// The tile's input, 16-byte chunks at swz() slots. 128-byte aligned: after the static shared
// memory it began 112 bytes past a 128-byte boundary, and bulk encode was 8% slower (measured;
// the swizzle's bank spread is the same at any 16-byte offset, so the cost lies elsewhere,
// perhaps in cp.async writes that straddle 128-byte rows).
extern __shared__ __align__(128) uint4 g_staged[];

// encode_unit() as a call, for fp16 and fp32 in the generic kernel (auto and mixed batches):
// inlined, their paths shared the kernel's register allocation with the bf16 path, which
// spilled. Apart: bf16 auto +7%, fp16 auto -5%, fp32 auto -1% (bulk), bf16 being the common
// case of the plugin; apart fp32 alone lost on all three.
template <Codec C, int MU>
__device__ __noinline__ void encode_unit_apart(const LaunchItem& it, unsigned long long* st, uint8_t* scratch,
                                               uint32_t* group, uint32_t u, bool staged, bool header) {
  encode_unit<C, MU, 16>(it, st, scratch, group, g_sh.plan.L, u, g_sh, g_staged, staged, header);
}

// FIXED: the codec of every item of the launch when the host knows it (all items coded with one
// codec, none auto), else kAnyCodec. A kernel for one codec carries only its coding path - a
// third of the mixed kernel's code, whose instruction fetch stalls were 15% of its stall
// samples - and holds no codec in a register.
constexpr int kAnyCodec = -1;

// Elements per thread and block: 32 (128 threads per CTA) in the bulk kernels for a known
// codec, whose per-thread and per-warp work of a tile (waits, barriers, scans, addresses,
// escape loops) then serves twice the elements; else 16 (256 threads). The generic kernel (auto
// and mixed batches) at 128 threads was slower: auto bf16 -2 to -5%, fp16 -5%, fp32 -6%.
constexpr int encode_pt(int MU, int fixed) { return MU > 1 && fixed != kAnyCodec ? 32 : 16; }
constexpr int encode_threads(int MU, int fixed) { return kBlockElems / encode_pt(MU, fixed); }

template <int MU, int FIXED>
__global__ void __launch_bounds__(encode_threads(MU, FIXED), 6) encode_kernel(const __grid_constant__ Launch P) {
  constexpr int PT = encode_pt(MU, FIXED), NT = kBlockElems / PT;
  static_assert(FIXED != kAnyCodec || NT == kThreads, "the classifier and encode_unit_apart() use 256 threads");
  EncShared& sh = g_sh;
  uint4* const staged = g_staged;
  ZIPCCL_MARK_TIME(12);
  ZIPCCL_MARK(0);
  if (MU > 1) allow_dependents();  // the follow-up kernels may launch once the last tiles run
  const int item = find_item(P);
  const LaunchItem& it = P.items[item];
  const uint32_t b = blockIdx.x - it.tile0;
  unsigned long long* st = P.state + it.tile0;
  // The tile's input is requested first, so that the codec choice and the plan overlap with
  // the loads. An auto item is staged as bf16/fp16 tiles it, which is how fp32 tiles it too
  // except in 8 KiB tiles (MU = 1), where an fp32 tile restages.
  // Neither the guess nor the codec is kept in a register across the barrier (at 40 registers
  // ptxas spilled the codec, and its reload from local memory stalled every warp after it).
  constexpr bool fixed = FIXED != kAnyCodec;
  {
    const Codec guess = fixed ? static_cast<Codec>(FIXED) : it.auto_codec ? Codec::BF16 : static_cast<Codec>(it.codec);
    if (guess != Codec::Raw) stage_tile<MU, NT>(it, guess, b, staged);
    const Codec c = !fixed && it.auto_codec ? item_codec(P, item, b, sh) : guess;
    if (threadIdx.x == 0) sh.plan = make_plan(it, c);
  }
  __syncthreads();
  ZIPCCL_MARK(1);
  const Plan& p = sh.plan;
  const Codec c = fixed ? static_cast<Codec>(FIXED) : p.c;
  if (p.raw && !p.too_large) {
    if (!P.raw_header_only && it.cap >= kHeaderBytes + it.bytes) {
      uint64_t lo, len;
      raw_slice(it, b, &lo, &len);
      cta_copy<NT>(it.out + kHeaderBytes + lo, it.in + lo, len);
    }
  } else if (!p.too_large &&
             b * uint64_t(tile_blocks<MU>(c)) < p.L.n_blocks) {
    // Staged as guessed: as c tiles it (c is not Raw here), or as bf16 tiles it for an auto item.
    const bool as_staged = fixed || !it.auto_codec || unit_bytes<MU>(Codec::BF16) == unit_bytes<MU>(c);
    if (!as_staged) {  // the copies in flight must land before restaging
      cp_async_wait(0);
      __syncthreads();
    }
    uint32_t* const group = P.group_esc ? P.group_esc + group_slot(it.tile0, item, b) : nullptr;
    const auto unit = [&](auto codec) {
      constexpr Codec C = decltype(codec)::value;
      if constexpr (fixed || C == Codec::BF16)
        encode_unit<C, MU, PT>(it, st, P.scratch, group, p.L, b, sh, staged, as_staged, !P.checksum);
      else
        encode_unit_apart<C, MU>(it, st, P.scratch, group, b, as_staged, !P.checksum);
    };
    if constexpr (fixed) {
      unit(std::integral_constant<Codec, static_cast<Codec>(FIXED)>());
    } else {
      switch (c) {
        case Codec::BF16: unit(std::integral_constant<Codec, Codec::BF16>()); break;
        case Codec::FP16: unit(std::integral_constant<Codec, Codec::FP16>()); break;
        default: unit(std::integral_constant<Codec, Codec::FP32>()); break;
      }
    }
  }
  cp_async_wait(0);  // no copy may land in shared memory after the CTA has left
  ZIPCCL_MARK(8);
  // Small launches: the item's last tile finalizes (bulk ones: encode_finish_kernel); slot 9
  // follows slot 8 at once in bulk ones.
  bool last = false;
  if (MU == 1) last = finish_tile(P, item, &sh.flag);
  ZIPCCL_MARK(9);
  if (last) finalize<MU>(P, item, p, st, sh);
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
