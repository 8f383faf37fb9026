// Pieces shared by the encode and decode kernels: launch parameters, the tile -> item map,
// CTA-wide reductions and scans, item completion, and CRC32C.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "zipccl/codec.h"
#include "zipccl/format.h"
#include "zipccl/gpu_codec.h"
#include "ordering.cuh"
#include "swizzle.h"

namespace zipccl::gpu::detail {

// One CTA (a "tile") codes MU * 8 KiB of original data: MU blocks of bf16/fp16, MU/2 (at
// least 1) of fp32, or a slice of a Raw payload. MU is 1 for small batches (more CTAs, lower
// latency); bulk batches use kEncodeBulkMU / kDecodeBulkMU (docs/gpu-codec.md has the
// measurements). In each block a thread owns 16 consecutive elements (kThreads per CTA), except
// in the bulk encode kernels for a known codec: 32 (128 threads per CTA; encode.cu's encode_pt()).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = kBlockElems / kThreads;
static_assert(kPerThread == 16, "a thread owns two 8-element groups of each block");
constexpr int kMaxUnitBlocks = 4;
constexpr uint64_t kBulkBytes = uint64_t(16) << 20;  // batches this large use the bulk MU
constexpr int kEncodeBulkMU = 4;
constexpr int kDecodeBulkMU = 2;
// Bulk encode tiles whose escape chunks total at most this many bytes (N(0,1) bf16: ~400 of a
// 32 KiB tile) leave them in temp and do not look back (encode.cu).
constexpr uint32_t kEscScratch = 1024;
// ... and add their escape bytes to their group's sum (per item, groups of kGroupTiles tiles),
// from which encode_fixup_kernel gets a tile's offset in one round of loads.
constexpr uint32_t kGroupTiles = 128;
template <int MU>
constexpr uint32_t tile_bytes() {
  return MU * 8192u;
}
template <Codec C, int MU>
constexpr int unit_blocks() {
  return C == Codec::FP32 ? (MU > 1 ? MU / 2 : 1) : MU;
}

// format.h's geometry() (elem_bytes, R, K, exp_max) under short names, for the kernels' array
// sizes and unrolled loops.
template <Codec C>
struct Geom {
  static_assert(C == Codec::BF16 || C == Codec::FP16 || C == Codec::FP32, "coded codecs only");
  static constexpr uint32_t EB = geometry(C).elem_bytes;
  static constexpr uint32_t R = geometry(C).res_planes;
  static constexpr uint32_t K = geometry(C).bit_planes;
  static constexpr uint32_t kExpMax = geometry(C).exp_max;
};

// Launch parameters travel as kernel arguments (no host->device copy); kMaxBatch items fit
// in the 4 KiB parameter space.
struct LaunchItem {
  const uint8_t* in;
  uint8_t* out;
  uint64_t bytes;  // encode: input bytes; decode: message bytes available
  uint64_t cap;    // output capacity
  uint64_t limit;  // encode: largest coded message accepted (from max_ratio), as the CPU's
  uint32_t tile0;  // first tile (CTA) of this item in the grid
  uint32_t tiles;
  uint8_t codec;
  uint8_t auto_codec;
};

struct Launch {
  LaunchItem items[kMaxBatch];
  int n;
  uint8_t checksum;
  uint8_t raw_header_only;
  uint32_t* item_done;        // temp: tiles finished, per item
  uint32_t* item_err;         // temp: ~(order << 4 | status) of the first error, per item
  uint32_t* item_codec;       // temp: kCodecChosen | codec, once tile 0 has classified an auto item
  unsigned long long* state;  // temp: look-back state, per tile
  uint8_t* scratch;           // temp: bulk encode tiles' escape chunks, kEscScratch bytes per tile
  uint32_t* group_esc;        // temp, with scratch: escape bytes per group of kGroupTiles tiles
  Result* results;
};
static_assert(sizeof(Launch) <= 4000, "kernel parameters must fit in 4 KiB");

// Temp layout: item_done[kMaxBatch], item_err[kMaxBatch], item_codec[kMaxBatch], then 8 bytes
// per tile, then (bulk encode launches) kEscScratch bytes per tile from a 16-byte boundary and
// the group sums.
constexpr size_t kTempHead = 3 * kMaxBatch * sizeof(uint32_t);
constexpr uint32_t kCodecChosen = 0x100;

// Where a launch of `tiles` tiles has its bulk scratch in temp: after the words, 16-byte aligned.
inline size_t scratch_at(size_t tiles) {
  return (kTempHead + tiles * 8 + 15) & ~size_t(15);
}
// Group sums of a launch of `tiles` tiles: item i's groups start at group_slot(tile0_i, i, 0),
// past the previous item's (ceil(t / G) <= floor(t / G) + 1).
inline size_t group_words(size_t tiles) {
  return tiles / kGroupTiles + kMaxBatch + 1;
}
__host__ __device__ __forceinline__ uint32_t group_slot(uint32_t tile0, int item, uint32_t u) {
  return tile0 / kGroupTiles + item + u / kGroupTiles;
}
// Groups of an item of `tiles` tiles.
__host__ __device__ __forceinline__ uint32_t item_groups(uint32_t tiles) {
  return (tiles + kGroupTiles - 1) / kGroupTiles;
}

inline uint32_t tiles_for(uint64_t bytes, uint32_t tile) {
  return bytes == 0 ? 1u : static_cast<uint32_t>((bytes + tile - 1) / tile);
}

// Completes a Launch whose items 0..m-1 are filled in except for their tiles: one tile per
// MU * 8 KiB of each item's tile_size member (encode: input bytes; decode: output capacity),
// which covers the units of every codec and Raw slices, plus `extra` tiles per item after
// those (the decoder's header checker); MU = bulk_mu for bulk batches, else 1. Points the
// launch at its temp words, bulk scratch (bulk_scratch bytes per tile, where temp has room) and
// results. Returns the grid size, or 0 when temp is too small for the words.
inline uint32_t finish_launch(Launch& P, int m, uint64_t LaunchItem::*tile_size, int bulk_mu, uint32_t extra,
                              uint32_t bulk_scratch, void* temp, size_t temp_size, Result* results, bool* bulk) {
  uint64_t total = 0;
  for (int i = 0; i < m; ++i) total += P.items[i].*tile_size;
  *bulk = total >= kBulkBytes;
  const uint32_t tile = *bulk ? bulk_mu * tile_bytes<1>() : tile_bytes<1>();
  uint32_t tiles = 0;
  for (int i = 0; i < m; ++i) {
    P.items[i].tile0 = tiles;
    P.items[i].tiles = tiles_for(P.items[i].*tile_size, tile) + extra;
    tiles += P.items[i].tiles;
  }
  if (temp_size < kTempHead + size_t(tiles) * 8) return 0;
  // The scratch speeds bulk encodes up; without room for it they run without (every tile looks back).
  const size_t at = scratch_at(tiles);
  const size_t scratch = *bulk && temp_size >= at + size_t(tiles) * bulk_scratch + group_words(tiles) * sizeof(uint32_t)
                             ? size_t(tiles) * bulk_scratch
                             : 0;
  P.n = m;
  P.item_done = static_cast<uint32_t*>(temp);
  P.item_err = P.item_done + kMaxBatch;
  P.item_codec = P.item_err + kMaxBatch;
  P.state = reinterpret_cast<unsigned long long*>(static_cast<uint8_t*>(temp) + kTempHead);
  P.scratch = scratch ? static_cast<uint8_t*>(temp) + at : nullptr;
  P.group_esc = scratch ? reinterpret_cast<uint32_t*>(P.scratch + scratch) : nullptr;
  P.results = results;
  return tiles;
}

// The item that tile `tile` (by default this CTA's) belongs to.
__device__ __forceinline__ int find_item(const Launch& P, uint32_t tile) {
  int lo = 0, hi = P.n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (P.items[mid].tile0 <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}
__device__ __forceinline__ int find_item(const Launch& P) {
  return find_item(P, blockIdx.x);
}

__device__ __forceinline__ uint32_t warp_sum(uint32_t x) {
#if __CUDA_ARCH__ >= 800
  return __reduce_add_sync(~0u, x);  // one REDUX instead of five shuffles and adds
#else
  for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(~0u, x, o);
  return x;
#endif
}
__device__ __forceinline__ uint64_t warp_sum64(uint64_t x) {
  for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(~0u, x, o);
  return x;
}

// M (at most 4) independent exclusive prefix sums over the CTA in thread order, of per-thread
// values <= 32 (escape counts of a thread's 16 or 32 elements of a block) over NW warps;
// total[m] gets the sums.
// Two sums travel as the 16-bit halves of a word (a CTA's sum is at most 4096), so one warp
// scan per pair and one barrier serve them all; sh is written once per tile (callers scan
// once), so no barrier after the reads.
template <int M, int NW = kWarps>
__device__ __forceinline__ void cta_scans(uint32_t (&x)[M], uint32_t (&total)[M], uint32_t (*sh)[kMaxUnitBlocks / 2]) {
  static_assert(M >= 1 && M <= kMaxUnitBlocks, "two sums per word");
  constexpr int K = (M + 1) / 2;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t xs[2 * K] = {}, v[K], inc[K];
#pragma unroll
  for (int m = 0; m < M; ++m) xs[m] = x[m];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    v[k] = xs[2 * k] | xs[2 * k + 1] << 16;
    inc[k] = v[k];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(~0u, inc[k], o);
      if (lane >= o) inc[k] += y;
    }
    if (lane == 31) sh[w][k] = inc[k];
  }
  __syncthreads();
  uint32_t ts[2 * K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    uint32_t t = lane < NW ? sh[lane][k] : 0;  // the warp sums in lanes 0..NW-1
    // The total first, in one instruction (the encoder publishes it to its successors at
    // once), then this warp's offset from an inclusive scan of the warp sums.
    const uint32_t all = __reduce_add_sync(~0u, t);
#pragma unroll
    for (int o = 1; o < NW; o <<= 1) {
      const uint32_t y = __shfl_up_sync(~0u, t, o);
      if (lane >= o) t += y;
    }
    const uint32_t before = __shfl_sync(~0u, t, (w + 31) & 31);
    const uint32_t excl = (w ? before : 0) + inc[k] - v[k];
    xs[2 * k] = excl & 0xFFFF;
    xs[2 * k + 1] = excl >> 16;
    ts[2 * k] = all & 0xFFFF;
    ts[2 * k + 1] = all >> 16;
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    x[m] = xs[m];
    total[m] = ts[m];
  }
}

// 16-byte asynchronous global->shared copy (sm_80+), completed by cp_async_wait().
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most `pending` (0..3) of this thread's committed groups are in flight. The
// instruction takes an immediate, hence the switch (the encoder's block loop is not unrolled).
__device__ __forceinline__ void cp_async_wait(int pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
  }
}

// The bulk copy engine (sm_90 TMA): one thread copies a 16-byte aligned run of bytes (a multiple
// of 16) to shared memory with one instruction, counted on an mbarrier that waiting threads poll.
// On older GPUs (has_bulk_copy() false) the callers stage with cp.async instead.
__device__ __forceinline__ constexpr bool has_bulk_copy() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return true;
#else
  return false;
#endif
}
// Thread 0 of the CTA, before the barrier that precedes every wait: a fresh barrier expecting
// `bytes` from the copies that follow.
__device__ __forceinline__ void mbar_expect(uint64_t* mbar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(mbar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(mbar)), "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, uint32_t bytes, uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(bytes), "r"(smem_addr(mbar))
               : "memory");
#endif
}
// Wait until the barrier's copies have landed (its first phase).
__device__ __forceinline__ void mbar_wait(uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(mbar))
        : "memory");
  } while (!done);
#endif
}

// Stage rounds * 4 KiB from 16-byte aligned src to chunks first_chunk.. (a multiple of 32) of
// dst: one asynchronous copy per thread and round, no bounds checks.
__device__ __forceinline__ void stage_rounds(uint4* dst, uint32_t first_chunk, const uint8_t* src, uint32_t rounds) {
  uint4* d = dst + first_chunk + swz(threadIdx.x);
  const uint8_t* s = src + 16 * threadIdx.x;
#pragma unroll 1
  for (uint32_t r = 0; r < rounds; ++r) cp_async16(d + kThreads * r, s + 16 * kThreads * r);
}

// Stage len bytes from src into 16-byte chunks at swizzled slots of dst, zero-filling the
// last chunk; asynchronous 16-byte copies when src is 16-byte aligned, by a CTA of NT threads.
// Reads nothing past len. (Its whole-round loop is stage_rounds()'s, kept inline: calling that
// raised the bulk decoder's spill loads from 28 to 356 bytes, ptxas -v, session 7.)
template <int NT = kThreads>
__device__ __forceinline__ void stage(uint4* dst, uint32_t first_chunk, const uint8_t* src, uint32_t len,
                                      bool vec) {
  if (vec && len % (16 * NT) == 0) {  // whole rounds: no per-chunk checks
    for (uint32_t c = threadIdx.x; c < len / 16; c += NT) cp_async16(dst + swz(first_chunk + c), src + 16 * c);
    return;
  }
  const uint32_t chunks = (len + 15) / 16;
  for (uint32_t c = threadIdx.x; c < chunks; c += NT) {
    uint8_t* d = reinterpret_cast<uint8_t*>(dst + swz(first_chunk + c));
    if (vec && 16 * c + 16 <= len) {
      cp_async16(d, src + 16 * c);
    } else {
      for (uint32_t i = 0; i < 16; ++i) d[i] = 16 * c + i < len ? src[16 * c + i] : 0;
    }
  }
}

// Programmatic dependent launch (sm_90): a bulk launch's follow-up kernels (the finish kernels,
// and the encoder's fixup) are launched by launch_after() to start while the kernel before them
// drains; each waits in grid_dependency_wait() until that kernel has completed and
// its writes are visible, and lets its own successor launch with allow_dependents(). Elsewhere
// these are no-ops and the launch is an ordinary stream-ordered one.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// A batch call that fails after a kernel of it is queued (a follow-up that did not launch, a
// later launch's temp too small) returns err and zeroes temp behind that kernel, which may
// have left flags and counters in it; the batch's results are then never published.
inline cudaError_t launch_error(cudaError_t err, bool queued, void* temp, size_t temp_size, cudaStream_t stream) {
  if (queued) init_temp(temp, temp_size, stream);
  return err;
}

template <typename... Args>
cudaError_t launch_after(void (*kernel)(Args...), uint32_t grid, uint32_t block, cudaStream_t stream, Args... args) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev))
    major = 0;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  // Only kernels compiled from sm_90 PTX wait in grid_dependency_wait(): a build without sm_90
  // code runs JIT-compiled older PTX on an H100, whose follow-ups must launch stream-ordered.
  cudaFuncAttributes fa{};
  cfg.numAttrs = major >= 9 && cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.ptxVersion >= 90 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// Count this tile as finished; true in every thread of the CTA that finishes the item last,
// which then sees all other tiles' writes. The add releases the CTA's writes (the barrier
// orders them before it) and acquires those of the tiles counted before; the barrier after it
// passes that on to the other threads. (Sequentially consistent fences around a relaxed add,
// in every thread of the last CTA, made small launches 0.2-0.4 us slower.)
__device__ __forceinline__ bool finish_tile(const Launch& P, int item, int* sh_flag) {
  __syncthreads();
  if (threadIdx.x == 0) {
    *sh_flag = count_acq_rel(&P.item_done[item]) == P.items[item].tiles - 1;
  }
  __syncthreads();
  return *sh_flag;
}

// Publish the item's result, system-wide visible: the done flag last, by a release store at
// system scope (it orders the fields, and every write the caller's barrier ordered before it).
__device__ __forceinline__ void publish_result(const Launch& P, int item, uint64_t bytes, Status s, Codec c,
                                               bool raw_from_input) {
  Result* r = &P.results[item];
  r->bytes = s == Status::kOk ? bytes : 0;
  r->status = static_cast<int32_t>(s);
  r->codec = static_cast<uint8_t>(c);
  r->raw_from_input = raw_from_input;
  r->reserved = 0;
  set_flag_release_sys(&r->done);
}

// Copy len bytes with the whole CTA of NT threads (16-byte vectors when both sides allow it).
template <int NT = kThreads>
__device__ __forceinline__ void cta_copy(uint8_t* dst, const uint8_t* src, uint64_t len) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const uint64_t nv = len / 16;
    for (uint64_t i = threadIdx.x; i < nv; i += NT)
      reinterpret_cast<uint4*>(dst)[i] = __ldcs(reinterpret_cast<const uint4*>(src) + i);
    for (uint64_t i = nv * 16 + threadIdx.x; i < len; i += NT) dst[i] = src[i];
  } else {
    for (uint64_t i = threadIdx.x; i < len; i += NT) dst[i] = src[i];
  }
}

// ---- CRC32C of a byte range by one CTA: a CRC per thread segment, combined as zlib's
// crc32_combine does (multiplication by x^(8 len) modulo the polynomial). Optional feature;
// its throughput is that of one CTA.
constexpr uint32_t kCrcPoly = 0x82F63B78u;

__device__ __forceinline__ uint32_t multmodp(uint32_t a, uint32_t b) {  // a != 0
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kCrcPoly : b >> 1;
  }
  return p;
}

__device__ __forceinline__ uint32_t x8nmodp(uint64_t n) {  // x^(8n) mod P
  uint32_t p = 1u << 31, sq = 1u << 30;                    // x^0, x^1
  for (int i = 0; i < 3; ++i) sq = multmodp(sq, sq);
  while (n) {
    if (n & 1) p = multmodp(sq, p);
    sq = multmodp(sq, sq);
    n >>= 1;
  }
  return p;
}

struct CrcShared {
  uint32_t table[256];
  uint32_t part[kThreads];
};

// Every thread gets crc32c(p, n).
__device__ __forceinline__ uint32_t cta_crc32c(const uint8_t* p, uint64_t n, CrcShared& sh) {
  {
    uint32_t c = threadIdx.x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kCrcPoly & (0u - (c & 1)));
    sh.table[threadIdx.x] = c;
  }
  __syncthreads();
  const uint64_t seg = (n + kThreads - 1) / kThreads;
  const uint64_t lo = seg * threadIdx.x < n ? seg * threadIdx.x : n;
  const uint64_t hi = lo + seg < n ? lo + seg : n;
  uint32_t c = ~0u;
  for (uint64_t i = lo; i < hi; ++i) c = sh.table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  sh.part[threadIdx.x] = ~c;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t crc = sh.part[0];
    const uint32_t xseg = seg ? x8nmodp(seg) : 0;
    for (int t = 1; t < kThreads; ++t) {
      const uint64_t a = seg * t < n ? seg * t : n, z = a + seg < n ? a + seg : n;
      if (z == a) break;
      crc = multmodp(z - a == seg ? xseg : x8nmodp(z - a), crc) ^ sh.part[t];
    }
    sh.part[0] = crc;
  }
  __syncthreads();
  const uint32_t crc = sh.part[0];
  __syncthreads();
  return crc;
}

// Little-endian byte loads for unaligned or partial data.
__device__ __forceinline__ uint32_t load_le(const uint8_t* p, uint32_t nbytes) {
  uint32_t v = 0;
  for (uint32_t i = 0; i < nbytes; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}

}  // namespace zipccl::gpu::detail
