// The resident codec (zipccl/gpu_service.h): a persistent kernel whose CTAs take tiles by
// ticket. Each job the host publishes becomes one slot: a one-item Launch in device memory whose
// tiles own a consecutive range of tickets. A CTA claims the next ticket, waits until a job
// covers it, and runs that tile exactly as the launched kernels do (encode_body.cuh,
// decode_body.cuh): the same look-back, the same finish by the item's last tile, the same
// result. Tickets are claimed in increasing order, so every wait inside a tile (look-back, an
// auto item's classification) is on a lower ticket that a running CTA holds.
//
// The CTA holding the lowest waiting ticket reads the host's doorbell (one 16-byte load of mapped
// memory, the next job's words beside it) and posts what it finds, a job per lane of its first
// warp; the others wait on device memory. When the host asks it to stop, the kernel finishes what
// it has taken and exits, the last CTA out resetting the board for the next launch and telling the
// host.
#include <cstring>

#include "decode_body.cuh"
#include "encode_body.cuh"
#include "launch.cuh"
#include "tiling.cuh"
#include "trace.cuh"
#include "zipccl/gpu_service.h"

namespace zipccl::gpu {
namespace detail {
namespace {

// The largest tiles (32 KiB of original data both ways): a tile's fixed costs (its slot, the
// look-back, the count, and a decode's dependent reads of header and entries before its
// sections) are round trips to L2, or over PCIe from pinned host memory, that a CTA of this
// kernel, one of two on its SM, cannot overlap with other tiles, so bigger tiles move more bytes
// per round trip. (The launched bulk decoder, 8 CTAs to an SM, is faster at half this size.)
constexpr int kEncodeMU = kEncodeBulkMU, kDecodeMU = kMaxUnitBlocks;
constexpr uint32_t kEncodeTile = tile_bytes<kEncodeMU>(), kDecodeTile = tile_bytes<kDecodeMU>();
// An encode alone on an idle kernel whose 8 KiB tiles fit one per CTA (16 CTAs: up to 128 KiB), and
// its slot's temp (kMaxJobTiles), takes those (LaunchItem::small_tiles): it waits for one 8 KiB
// tile's coding rather than one 32 KiB tile's. Among other jobs the larger tiles move more per
// round trip.
constexpr uint32_t kSmallTile = tile_bytes<1>();
static_assert(kSmallTile == kServiceSmallTile, "the protocol's small tile");
static_assert(encode_threads(kEncodeMU, kAnyCodec) == kThreads, "one CTA shape for both directions");
// Tiles of the largest job: a decode's output tiles and its header checker.
constexpr uint32_t kMaxJobTiles = uint32_t(kServiceMaxJob / (kEncodeTile < kDecodeTile ? kEncodeTile : kDecodeTile)) + 1;
constexpr size_t kSlotTemp = (kTempHead + size_t(kMaxJobTiles) * 8 + 255) & ~size_t(255);
// Dynamic shared memory: a tile's (either way), then, for the kernel that stages, a second encode
// tile's, so that a CTA stages its next encode tile while it codes this one (NextTile). Where two
// CTAs of that size do not fit on an SM (100 KiB: sm_86, sm_89), the kernel that does not runs.
constexpr size_t kTileBytes =
    kEncodeTile > decode_stage_bytes<kDecodeMU>() ? kEncodeTile : decode_stage_bytes<kDecodeMU>();
constexpr uint32_t kSecondBuf = uint32_t((kTileBytes + 127) / 128 * 128 / 16);  // in 16-byte chunks
constexpr size_t kSharedBytes = size_t(kSecondBuf) * 16 + kEncodeTile;

struct Board {
  unsigned long long head;    // host jobs taken (kept across launches)
  unsigned long long posted;  // tickets of the jobs taken
  unsigned long long next;    // tickets claimed
  uint32_t stopping;
  uint32_t exits;
  // A slot's tickets: the low 32 bits of the first, and the count above them, in one word so
  // that a CTA looking for its ticket never sees half of a slot's update. Live tickets lie
  // within far less than 2^31 of each other, so the low bits suffice.
  unsigned long long range[kServiceSlots];
  uint32_t remaining[kServiceSlots];  // tiles not finished: the slot is free at 0
  uint8_t op[kServiceSlots];
  uint8_t in_host[kServiceSlots];  // ServiceJob::in_host
};

struct DeviceState {
  Board board;
  Launch launch[kServiceSlots];
  alignas(256) uint8_t temp[kServiceSlots][kSlotTemp];  // each slot's Launch temp, left zeroed
};

__device__ __forceinline__ uint4 load_volatile16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Words 2i and 2i + 1 of a PostedJob from one 16-byte read of them.
__device__ __forceinline__ void put_words(PostedJob& p, int i, uint4 v) {
  p.word[2 * i] = v.x | uint64_t(v.y) << 32;
  p.word[2 * i + 1] = v.z | uint64_t(v.w) << 32;
}
template <typename T>
__device__ __forceinline__ T load_volatile(const T& x) {
  return *reinterpret_cast<const volatile T*>(&x);
}
template <typename T>
__device__ __forceinline__ void store_volatile(T& x, T v) {
  *reinterpret_cast<volatile T*>(&x) = v;
}

// The slot and tile of ticket t if it is posted, by one warp: every lane tests one slot's range.
__device__ __forceinline__ bool find_ticket(Board& b, unsigned long long t, uint32_t lane, uint32_t* slot,
                                            uint32_t* tile) {
  unsigned long long posted;  // acquires what the poller published before it
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(posted) : "l"(&b.posted) : "memory");
  const unsigned long long r = load_volatile(b.range[lane]);
  const uint32_t u = uint32_t(t) - uint32_t(r);
  const uint32_t hit = __ballot_sync(~0u, posted > t && u < uint32_t(r >> 32));
  *slot = hit ? __ffs(int(hit)) - 1 : 0;  // one slot covers a posted ticket
  *tile = __shfl_sync(~0u, u, *slot);
  return hit != 0;
}

// A job the kernel refuses (an unknown op, a size beyond kServiceMaxJob) completes at once.
__device__ void refuse(Result* r, JobTimes* t, Status s) {
  t->end = globaltimer_ns();
  r->bytes = 0;
  r->status = static_cast<int32_t>(s);
  r->codec = 0;
  r->raw_from_input = 0;
  r->small_tiles = 0;
  set_flag_release_sys(&r->done);
}

// Warp 0 of the CTA holding the lowest waiting ticket (the one CTA that polls): takes the jobs the
// host has published since the last look, up to one per slot, and posts their tiles with one store;
// or raises `stopping` once the host asked for it and every job is taken. Lanes 1-4 read the next
// job's tagged words with the doorbell, so a look that finds that job whole costs no round trip
// over PCIe beyond the doorbell's (a lone job on an idle kernel: ~2 us sooner); otherwise lane i
// reads the look's i-th job after the doorbell and fills its slot, one round trip however many jobs
// a look takes (the tiles wait for it once their posted tickets run out). A job whose slot's last
// job still has tiles running, held by CTAs with lower tickets, is left with those after it for a
// later look. Where no slot has tiles running and the look takes one encode, it may take small
// tiles (kSmallTile).
__device__ void poll_host(ServiceHost* host, DeviceState* s, uint32_t lane) {
  Board& b = s->board;
  __threadfence();  // after the tickets this CTA saw: the last poller's head
  unsigned long long head = 0, posted = 0;
  uint4 bell = {}, next = {};
  if (lane <= kPostedWords / 2) {
    head = load_volatile(b.head);
    if (lane == 0) {
      posted = load_volatile(b.posted);
      bell = load_volatile16(&host->tail);
    } else {  // the next job's words, in the doorbell's round trip (PostedJob)
      next = load_volatile16(&host->jobs[head % kServiceRing].word[2 * (lane - 1)]);
    }
  }
  head = __shfl_sync(~0u, head, 0);
  posted = __shfl_sync(~0u, posted, 0);
  const uint64_t tail = __shfl_sync(~0u, bell.x, 0) | uint64_t(__shfl_sync(~0u, bell.y, 0)) << 32;
  if (tail == head) {
    const uint64_t stop = bell.z | uint64_t(bell.w) << 32;
    if (lane == 0 && (stop & kServiceStop) && head >= (stop & ~kServiceStop)) store_volatile(b.stopping, 1u);
    return;
  }
  // Lanes 1-4 hold the next job's words in order: the job is whole where all carry its tag.
  const uint32_t tag = service_tag(head);
  const uint32_t fresh = __ballot_sync(~0u, next.y == tag && next.w == tag);
  // The jobs the doorbell covers, after it: each lane's fence makes its reads of the doorbell and
  // the words an acquire, and the warp barrier (a shuffle orders no memory) hands that order to
  // every lane.
  __threadfence_system();
  __syncwarp();
  PostedJob first;
#pragma unroll
  for (int i = 0; i < kPostedWords / 2; ++i)
    put_words(first, i, make_uint4(__shfl_sync(~0u, next.x, i + 1), __shfl_sync(~0u, next.y, i + 1),
                                   __shfl_sync(~0u, next.z, i + 1), __shfl_sync(~0u, next.w, i + 1)));
  const uint64_t j = head + lane;
  const uint32_t slot = uint32_t(j % kServiceSlots);
  const bool seen = j < tail;  // kServiceSlots lanes: at most one job per slot
  const bool running = load_volatile(b.remaining[slot]) != 0;  // every slot, a lane each
  const uint32_t busy = __ballot_sync(~0u, seen && running);
  const bool idle = __ballot_sync(~0u, running) == 0;
  const uint64_t waiting = tail - head;
  const uint32_t take = busy ? uint32_t(__ffs(int(busy)) - 1) : uint32_t(waiting < kServiceSlots ? waiting : kServiceSlots);
  Result* const result = &host->results[j % kServiceRing];
  JobTimes* const times = &host->times[j % kServiceRing];
  ServiceJob job;
  uint32_t tiles = 0;
  bool small = false;
  if (lane < take) {
    PostedJob p = first;
    if (lane != 0 || (fresh & 0x1Eu) != 0x1Eu) {  // read again, after the doorbell
#pragma unroll
      for (int i = 0; i < kPostedWords / 2; ++i)
        put_words(p, i, load_volatile16(&host->jobs[j % kServiceRing].word[2 * i]));
    }
    job = unposted(p);
    times->taken = globaltimer_ns();
    const bool encode = job.op == kServiceEncode;
    if (!encode && job.op != kServiceDecode)
      refuse(result, times, Status::kBadHeader);
    else if ((encode ? job.in_bytes : job.out_cap) > kServiceMaxJob)
      refuse(result, times, encode ? Status::kTooLarge : Status::kNoSpace);
    else if (!encode)
      tiles = tiles_for(job.out_cap, kDecodeTile) + 1;
    else if ((small = take == 1 && idle && service_small_tiles(job.in_bytes, min(gridDim.x, kMaxJobTiles))))
      tiles = tiles_for(job.in_bytes, kSmallTile);
    else
      tiles = tiles_for(job.in_bytes, kEncodeTile);
  }
  // Each job's first ticket: after those of the look's jobs before it.
  uint32_t upto = tiles;
#pragma unroll
  for (uint32_t d = 1; d < 32; d <<= 1) {
    const uint32_t v = __shfl_up_sync(~0u, upto, d);
    if (lane >= d) upto += v;
  }
  const uint32_t total = __shfl_sync(~0u, upto, 31);
  if (tiles) {
    Launch& P = s->launch[slot];
    LaunchItem& it = P.items[0];
    it.in = static_cast<const uint8_t*>(job.in);
    it.out = static_cast<uint8_t*>(job.out);
    it.bytes = job.in_bytes;
    it.cap = job.out_cap;
    it.limit = job.limit;
    it.codec = job.codec;
    it.auto_codec = job.auto_codec;
    it.tile0 = 0;
    it.tiles = tiles;
    it.small_tiles = small;
    P.n = 1;
    P.checksum = job.checksum;
    P.raw_header_only = job.raw_header_only;
    P.item_done = reinterpret_cast<uint32_t*>(s->temp[slot]);
    P.item_err = P.item_done + kMaxBatch;
    P.item_codec = P.item_err + kMaxBatch;
    P.state = reinterpret_cast<unsigned long long*>(s->temp[slot] + kTempHead);
    P.scratch = nullptr;
    P.group_esc = nullptr;
    P.results = result;
    P.times = times;
    b.op[slot] = job.op;
    b.in_host[slot] = job.in_host;
    store_volatile(b.range[slot], uint32_t(posted + upto - tiles) | static_cast<unsigned long long>(tiles) << 32);
    b.remaining[slot] = tiles;
  }
  __threadfence();  // every lane's slot before the tickets that lead to it
  __syncwarp();
  if (lane == 0) {
    store_volatile(b.head, head + take);
    __threadfence();
    store_volatile(b.posted, posted + total);
  }
}

// Thread 0's state from tile to tile, in shared memory: in registers it was live through every
// tile's code, which spilled more (in shared memory: large pinned-host decodes 4% faster).
// ahead: the CTA's next ticket, claimed as soon as the current one is found. Stored here, the
// claim's round trip to L2 is waited for before the tile starts (in a register it overlapped
// the tile). A CTA runs its tickets in increasing order, so the lowest unfinished ticket always
// runs (tiles only wait on lower tickets). buf_s: the dynamic shared buffer (0 or 1) of the
// tile that comes next; prestaged_s: whether it is staged there; next_s: whether the running
// tile staged the next one; g_ahead: a decode tile staged ahead. slot_s / tile_s: the running
// tile's. found_s: ahead + 1 where the stager found it posted, its slot and tile in
// found_slot_s / found_tile_s, so that the next tile starts without looking it up again (two
// round trips to L2 per tile). g_state: the kernel's DeviceState.
__shared__ unsigned long long ahead, found_s;
__shared__ uint32_t buf_s, prestaged_s, next_s, slot_s, tile_s, found_slot_s, found_tile_s;
__shared__ DecAhead g_ahead;
__shared__ DeviceState* g_state;

// The CTA's next ticket, staged by warp 1 into the other buffer when it is posted: from an encode
// tile (while warp 0 looks back), an encode in kEncodeMU tiles that codes, its input 16-byte
// aligned (a misaligned one is staged a byte at a time, too slow for one warp); from a bf16 decode
// tile whose job reads mapped host memory (while warp 0 checks it; tiling.cuh's NoNext), a decode
// tile of such a job that stage_ahead() stages (sm_90). Each op stages only its own kind: the
// other's stager inlined into a tile doubled the kernel's spills (ptxas -v). Stateless, so that it
// holds no register through the tile.
struct NextTile {
  static constexpr bool kStages = true;
  // The buffer the tile being coded does not use.
  __device__ static uint4* other_buffer() { return g_staged + (buf_s ? 0 : kSecondBuf); }
  // Looks the CTA's next ticket up, and keeps what it finds for the next tile (found_s).
  __device__ static bool find_next(uint32_t lane, uint32_t* slot, uint32_t* tile) {
    const unsigned long long t = load_volatile(ahead);
    const bool hit = find_ticket(g_state->board, t, lane, slot, tile);
    if (hit && lane == 0) {
      found_slot_s = *slot;
      found_tile_s = *tile;
      found_s = t + 1;
    }
    return hit;
  }
  __device__ void stage() const {
    const uint32_t lane = threadIdx.x & 31;
    DeviceState* const s = g_state;
    uint32_t slot, tile;
    bool ok = find_next(lane, &slot, &tile) && s->board.op[slot] == kServiceEncode;
    const LaunchItem& it = s->launch[slot].items[0];
    const Codec guess = it.auto_codec ? Codec::BF16 : static_cast<Codec>(it.codec);
    ok = ok && !it.small_tiles && guess != Codec::Raw && (reinterpret_cast<uintptr_t>(it.in) & 15) == 0;
    if (ok) stage_tile<kEncodeMU, 32>(it, guess, tile, other_buffer(), lane);
    if (lane == 0) next_s = ok;
  }
  __device__ void stage_decode() const {
    const uint32_t lane = threadIdx.x & 31;
    DeviceState* const s = g_state;
    uint32_t slot, tile;
    const bool ok = find_next(lane, &slot, &tile) && s->board.op[slot] != kServiceEncode && s->board.in_host[slot] &&
                    stage_ahead<kDecodeMU>(s->launch[slot].items[0], tile, g_ahead, other_buffer(), lane);
    if (lane == 0) next_s = ok;
  }
  // A decode tile whose next is not staged ahead still looks it up, while warp 0 checks the tile.
  __device__ void look_ahead() const {
    uint32_t slot, tile;
    find_next(threadIdx.x & 31, &slot, &tile);
  }
  __device__ bool staged() const { return next_s != 0; }
  // A decode tile stages the next only where its job reads mapped host memory: in device memory
  // the lookup delayed the tile more than staging saved.
  __device__ bool after_decode() const { return g_state->board.in_host[slot_s] != 0; }
  __device__ DecAhead& decode_ahead() const { return g_ahead; }
};

// Two CTAs fit on an SM (at most 128 registers a thread), so that two tiles' chains of round
// trips overlap where the launch packs them (a stream of an SM partition, engine/sm_partition.h).
// STAGING: each CTA stages its next encode tile in a second buffer (NextTile); without, the
// staging state is unused and the kernel is what it was before staging, spills included.
template <bool STAGING>
__global__ void __launch_bounds__(kThreads, 2) resident_kernel(ServiceHost* host, DeviceState* s, uint32_t generation) {
  static_assert(kServiceSlots == 32, "warp 0 looks a ticket up in every slot at once, a slot per lane");
  __shared__ DecShared dsh;
  __shared__ int stop_s;
  Board& b = s->board;
  const uint32_t lane = threadIdx.x & 31;
  init_shared(dsh);
  if (threadIdx.x == 0) {
    uint32_t sm;
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    store_volatile(host->sm[blockIdx.x], sm + 1);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0)
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(&host->started), "r"(generation) : "memory");
  // tile_ns: the running sums of this CTA's tile time (ServiceHost::tile_ns), from the last
  // launch's; tile_t0: the tile's start. (ahead and the staging state: above NextTile.)
  __shared__ unsigned long long tile_ns[2], tile_t0;
  if (threadIdx.x == 0) {
    if constexpr (STAGING) {
      g_state = s;
      buf_s = prestaged_s = next_s = 0;
      found_s = 0;
      if constexpr (has_bulk_copy()) {
        for (int m = 0; m < kMaxUnitBlocks; ++m) mbar_init(&g_ahead.mbar[m]);
        g_ahead.tiles = 0;
      }
    }
    ahead = atomicAdd(&b.next, 1ull);
    tile_ns[0] = load_volatile(host->tile_ns[blockIdx.x][0]);
    tile_ns[1] = load_volatile(host->tile_ns[blockIdx.x][1]);
  }
  __syncthreads();
#ifdef ZIPCCL_GPU_TRACE
  // Thread 0's cycles per phase over the launch: tiles, ticket wait, lookup, tile, release.
  unsigned long long acc[5] = {}, c0 = clock64(), c1 = 0;
#define ZIPCCL_PHASE(i)           \
  do {                            \
    c1 = clock64();               \
    acc[i] += c1 - c0;            \
    c0 = c1;                      \
  } while (0)
#else
#define ZIPCCL_PHASE(i) ((void)0)
#endif
  for (;;) {
    if (threadIdx.x < 32) {
      // Lane 0 alone reads it (a volatile read is not hoisted out of the branch for every lane).
      const unsigned long long t = __shfl_sync(~0u, lane == 0 ? load_volatile(ahead) : 0ull, 0);
      // Found posted by the last tile's stager: no wait, no lookup.
      const bool found = STAGING && __shfl_sync(~0u, lane == 0 && found_s == t + 1, 0);
      int stop = 0;
      while (!found) {  // warp 0 together: the CTA at the lowest waiting ticket polls with all its lanes
        unsigned long long posted = lane == 0 ? load_volatile(b.posted) : 0;
        posted = __shfl_sync(~0u, posted, 0);
        if (t < posted) break;
        stop = lane == 0 ? int(load_volatile(b.stopping)) : 0;
        if (__shfl_sync(~0u, stop, 0)) {
          stop = 1;
          break;
        }
        if (t == posted)
          poll_host(host, s, lane);
        else
          __nanosleep(200);
      }
      if (lane == 0) ZIPCCL_PHASE(1);
      if (!stop) {
        uint32_t slot, tile;
        if (found) {
          slot = found_slot_s;
          tile = found_tile_s;
        } else {
          find_ticket(b, t, lane, &slot, &tile);  // posted: t < posted
        }
        if (lane == 0) {
          slot_s = slot;
          tile_s = tile;
          ahead = atomicAdd(&b.next, 1ull);
        }
      }
      if (lane == 0) stop_s = stop;
    }
    __syncthreads();
    if (stop_s) break;
    if (threadIdx.x == 0) ZIPCCL_PHASE(2);
    ZIPCCL_MARK(0);
    {
      const uint32_t slot = slot_s, tile = tile_s;
      const Launch& P = s->launch[slot];
      if (threadIdx.x == 0) {
        tile_t0 = globaltimer_ns();
        if (tile == 0) P.times->start = tile_t0;
      }
      if (b.op[slot] != kServiceEncode) {
        if constexpr (STAGING)
          decode_tile<kDecodeMU, true>(P, 0, tile, dsh, g_staged + (buf_s ? kSecondBuf : 0), prestaged_s != 0,
                                       NextTile{});
        else
          decode_tile<kDecodeMU, true>(P, 0, tile, dsh, g_staged);
      } else if (P.items[0].small_tiles) {
        encode_tile<1, kAnyCodec, true>(P, 0, tile);
      } else if constexpr (STAGING) {
        encode_tile<kEncodeMU, kAnyCodec, true>(P, 0, tile, buf_s ? kSecondBuf : 0, prestaged_s != 0, NextTile{});
      } else {
        encode_tile<kEncodeMU, kAnyCodec, true>(P, 0, tile);
      }
    }
    __syncthreads();  // the tile's writes, and the CTA's use of shared memory, are over
    ZIPCCL_MARK(10);
    if (threadIdx.x == 0) {
      ZIPCCL_PHASE(3);
      const uint32_t slot = slot_s;  // read again: nothing stays live through the tile
      const int op = b.op[slot] == kServiceEncode ? 0 : 1;
      tile_ns[op] += globaltimer_ns() - tile_t0;
      store_volatile(host->tile_ns[blockIdx.x][op], static_cast<uint64_t>(tile_ns[op]));
      __threadfence();
      atomicSub(&b.remaining[slot], 1u);
      if constexpr (STAGING) {
        prestaged_s = next_s;  // in the other buffer
        buf_s ^= next_s;
        next_s = 0;
      }
      ZIPCCL_PHASE(4);
#ifdef ZIPCCL_GPU_TRACE
      ++acc[0];
#endif
    }
  }
#ifdef ZIPCCL_GPU_TRACE
  if (threadIdx.x == 0 && blockIdx.x < kTraceTiles)
    for (int i = 0; i < 5; ++i) g_trace[blockIdx.x][11 + i] = acc[i];
#endif
#undef ZIPCCL_PHASE
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&b.exits, 1u) == gridDim.x - 1) {  // every CTA has left: ready for a new launch
      b.next = 0;
      b.posted = 0;
      b.stopping = 0;
      b.exits = 0;
      for (uint32_t i = 0; i < kServiceSlots; ++i) b.range[i] = 0;
      __threadfence_system();
      asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(&host->exited), "r"(generation) : "memory");
    }
  }
}

}  // namespace
}  // namespace detail

size_t service_device_bytes() { return sizeof(detail::DeviceState); }

cudaError_t service_init(void* device_mem, cudaStream_t stream) {
  return cudaMemsetAsync(device_mem, 0, sizeof(detail::DeviceState), stream);
}

cudaError_t service_load(bool* staging) {
  cudaFuncAttributes a;
  int dev = 0, per_sm = 0, reserved = 0;
  // Both kernels load now, whichever runs.
  cudaError_t e = cudaFuncSetAttribute(detail::resident_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(detail::kTileBytes));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(detail::resident_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(detail::kSharedBytes));
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, detail::resident_kernel<true>);
  if (e == cudaSuccess) e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev);
  if (e == cudaSuccess && staging)
    *staging = 2 * (a.sharedSizeBytes + size_t(reserved) + detail::kSharedBytes) <= size_t(per_sm);
  return e;
}

cudaError_t service_launch(ServiceHost* host, void* device_mem, int ctas, uint32_t generation, bool staging,
                           cudaStream_t stream) {
  if (!host || !device_mem || ctas < 1 || ctas > kServiceMaxCtas || generation == 0) return cudaErrorInvalidValue;
  auto* const state = static_cast<detail::DeviceState*>(device_mem);
  if (staging)
    detail::resident_kernel<true><<<ctas, detail::kThreads, detail::kSharedBytes, stream>>>(host, state, generation);
  else
    detail::resident_kernel<false><<<ctas, detail::kThreads, detail::kTileBytes, stream>>>(host, state, generation);
  return cudaGetLastError();
}

#ifdef ZIPCCL_GPU_TRACE
cudaError_t read_service_trace(unsigned long long (*out)[kTraceSlots]) {
  return cudaMemcpyFromSymbol(out, detail::g_trace, sizeof detail::g_trace);
}
#endif

}  // namespace zipccl::gpu
