// The resident GPU codec's protocol: one kernel of a few CTAs that stays on the GPU while it has
// work and codes the jobs the host posts in mapped pinned memory. Posting a job and reading its result
// are plain memory accesses: no CUDA call per job, so a thread that must never block (NCCL's
// proxy progress thread) can use it. Messages are byte-identical to encode_batch /
// decode_batch's, job by job, with the same checks of untrusted input.
//
// Protocol (host side):
//  - fill jobs[j % kServiceRing] (PostedJob: tagged 8-byte words), clear
//    results[j % kServiceRing].done, then publish the job by a release store of tail = j + 1 (the
//    doorbell); jobs are taken in order;
//  - poll results[j % kServiceRing].done (the device sets it last, by a release store at system
//    scope); a ring slot is reused only after its result has been read;
//  - the kernel says it runs by storing its launch's generation in `started` (a launch may wait
//    behind other work before it gets SMs);
//  - each CTA's time spent coding tiles is in tile_ns, summed over launches (service_tile_ns):
//    what the codec's capacity is measured by (bytes coded over that time, shared among the CTAs),
//    since the time from post to result also counts waits and queues, which read as the load
//    offered, not the rate the kernel could sustain; an encode taken alone on an idle kernel
//    whose tiles of kServiceSmallTile bytes are no more than its CTAs is coded in those, for its
//    latency, and its result says so (Result::small_tiles);
//  - each job's times on the GPU's clock (%globaltimer, ns) are in times: for a timeline of
//    where a job waits (the doorbell, the tickets of the jobs before it, its tiles); cleared by
//    service_post, each written before the job's done flag;
//  - to stop the kernel: service_stop() with the jobs posted (none may be posted after it); the
//    kernel finishes every job, then exits, and the last CTA out stores the launch's generation
//    in `exited`. A new launch (the next generation) starts from the same ServiceHost and device
//    memory, with `stop` cleared before it.
// This header has no CUDA: the threads that post and poll need none. The CUDA calls
// (zipccl/gpu_service.h) belong on a thread that may block.
#pragma once

#include <cstdint>

#include "zipccl/format.h"
#include "zipccl/gpu_result.h"

namespace zipccl::gpu {

constexpr uint32_t kServiceRing = 256;   // jobs posted and not yet read back
constexpr uint32_t kServiceSlots = 32;   // jobs being coded at once
constexpr int kServiceMaxCtas = 1024;    // CTAs a launch may have (NCCL_ZIP_GPU_CTAS)
// Largest job: encode input bytes, decode output capacity (the decoded size expected at most).
constexpr uint64_t kServiceMaxJob = uint64_t(16) << 20;
constexpr uint32_t kServiceSmallTile = 8192;  // a lone small encode's tiles (above)
// Whether an encode of in_bytes, taken alone on an idle kernel of `ctas` CTAs, is coded in
// kServiceSmallTile tiles: they fit one per CTA. The kernel's rule, and its emulation's.
ZIPCCL_HD bool service_small_tiles(uint64_t in_bytes, uint32_t ctas) {
  return (in_bytes == 0 ? 1u : uint32_t((in_bytes + kServiceSmallTile - 1) / kServiceSmallTile)) <= ctas;
}

constexpr uint64_t kServiceStop = uint64_t(1) << 63;

enum ServiceOp : uint8_t { kServiceEncode = 1, kServiceDecode = 2 };

struct ServiceJob {
  const void* in;     // device or mapped host memory
  uint64_t in_bytes;  // decode: the message's bytes (untrusted)
  void* out;
  uint64_t out_cap;   // encode: >= max_compressed_bytes(in_bytes); decode: decoded size at most
  uint64_t limit;     // encode: the largest coded message accepted (coded_limit())
  uint8_t op;         // ServiceOp
  uint8_t codec;      // encode: the Codec, unless auto_codec
  uint8_t auto_codec;
  uint8_t checksum;
  uint8_t raw_header_only;  // encode: as EncodeOptions::raw_header_only
  // decode: `in` is mapped host memory, whose round trips a CTA hides by staging the job's tiles
  // ahead (resident.cu's NextTile); in device memory that costs the tile before more than it saves.
  uint8_t in_host;
  uint8_t reserved[18];
};
static_assert(sizeof(ServiceJob) == 64, "a job is 64 bytes");

// A job as it lies in the ring: eight 8-byte words, each 32 bits of the job above its tag (the
// job's index + 1, low 32 bits), written by one store each. The kernel reads the next job in the
// same round trip over PCIe as the doorbell, and uses it only if every word carries the job's
// tag: reads over PCIe are not ordered with each other, and only 8-byte accesses are single-copy
// atomic (NCCL's LL protocol puts a flag in every 8 bytes for the same reason). A word read
// before the host rewrote it carries the tag of the slot's job before. Sizes are saturated to 32
// bits (anything past kServiceMaxJob is refused either way).
enum PostedWord { kInLow, kInHigh, kOutLow, kOutHigh, kInBytes, kOutCap, kLimit, kFlags, kPostedWords };
struct alignas(16) PostedJob {  // the kernel reads it 16 bytes at a time
  uint64_t word[kPostedWords];
};
static_assert(sizeof(PostedJob) == 64, "a posted job is 64 bytes");

ZIPCCL_HD constexpr uint32_t service_tag(uint64_t index) { return uint32_t(index + 1); }
ZIPCCL_HD constexpr uint32_t saturated32(uint64_t v) { return v > 0xFFFFFFFFull ? 0xFFFFFFFFu : uint32_t(v); }
ZIPCCL_HD bool tagged(const PostedJob& p, uint32_t tag) {
  bool all = true;
  for (int i = 0; i < kPostedWords; ++i) all &= uint32_t(p.word[i] >> 32) == tag;
  return all;
}
ZIPCCL_HD PostedJob posted(const ServiceJob& j, uint32_t tag) {
  const uint64_t in = reinterpret_cast<uintptr_t>(j.in), out = reinterpret_cast<uintptr_t>(j.out);
  const uint32_t flags = uint32_t(j.op) | uint32_t(j.codec) << 8 | uint32_t(j.auto_codec != 0) << 16 |
                         uint32_t(j.checksum != 0) << 17 | uint32_t(j.raw_header_only != 0) << 18 |
                         uint32_t(j.in_host != 0) << 19;
  const uint32_t data[kPostedWords] = {uint32_t(in), uint32_t(in >> 32), uint32_t(out), uint32_t(out >> 32),
                                       saturated32(j.in_bytes), saturated32(j.out_cap), saturated32(j.limit), flags};
  PostedJob p;
  for (int i = 0; i < kPostedWords; ++i) p.word[i] = uint64_t(tag) << 32 | data[i];
  return p;
}
ZIPCCL_HD ServiceJob unposted(const PostedJob& p) {
  const auto low = [&p](int i) { return uint32_t(p.word[i]); };
  ServiceJob j{};
  j.in = reinterpret_cast<const void*>(uintptr_t(low(kInLow) | uint64_t(low(kInHigh)) << 32));
  j.out = reinterpret_cast<void*>(uintptr_t(low(kOutLow) | uint64_t(low(kOutHigh)) << 32));
  j.in_bytes = low(kInBytes);
  j.out_cap = low(kOutCap);
  j.limit = low(kLimit);
  const uint32_t f = low(kFlags);
  j.op = uint8_t(f);
  j.codec = uint8_t(f >> 8);
  j.auto_codec = (f >> 16) & 1;
  j.checksum = (f >> 17) & 1;
  j.raw_header_only = (f >> 18) & 1;
  j.in_host = (f >> 19) & 1;
  return j;
}

// A job's times on the GPU's clock, 0 where not known: when a look took it from the ring, when
// its first tile started, when its result was written.
struct JobTimes {
  uint64_t taken, start, end;
};

// Mapped pinned host memory (cudaHostAlloc with cudaHostAllocMapped), zeroed before first use.
struct ServiceHost {
  // The doorbell: read by the kernel in one 16-byte load.
  alignas(16) uint64_t tail;  // jobs published
  uint64_t stop;              // kServiceStop | n: stop once n jobs are done
  alignas(16) uint32_t started;  // the generation of the last launch that has started running
  uint32_t exited;               // the generation of the last launch that has exited
  uint32_t reserved[2];
  PostedJob jobs[kServiceRing];
  Result results[kServiceRing];
  JobTimes times[kServiceRing];
  // CTA c's nanoseconds coding tiles of encodes [c][0] and decodes [c][1] (its thread 0 stores
  // the running sum after each tile, starting from the value a launch finds).
  uint64_t tile_ns[kServiceMaxCtas][2];
  // 1 + the SM CTA c of the last launch runs on (0: not yet known), stored as it starts.
  uint32_t sm[kServiceMaxCtas];
};

// The host's two steps of the protocol, plain memory accesses. Jobs are numbered from 0 in the
// order they are posted, across launches.
inline void service_post(ServiceHost* h, uint64_t index, const ServiceJob& job) {
  const PostedJob p = posted(job, service_tag(index));
  for (int i = 0; i < kPostedWords; ++i)
    __atomic_store_n(&h->jobs[index % kServiceRing].word[i], p.word[i], __ATOMIC_RELEASE);
  h->times[index % kServiceRing] = JobTimes{};
  __atomic_store_n(&h->results[index % kServiceRing].done, uint8_t(0), __ATOMIC_RELAXED);
  __atomic_store_n(&h->tail, index + 1, __ATOMIC_RELEASE);
}
// Asks the running kernel to exit once the first `jobs` jobs are done.
inline void service_stop(ServiceHost* h, uint64_t jobs) {
  __atomic_store_n(&h->stop, kServiceStop | jobs, __ATOMIC_RELEASE);
}
inline bool service_started(const ServiceHost* h, uint32_t generation) {
  return __atomic_load_n(&h->started, __ATOMIC_ACQUIRE) == generation;
}
inline bool service_exited(const ServiceHost* h, uint32_t generation) {
  return __atomic_load_n(&h->exited, __ATOMIC_ACQUIRE) == generation;
}
// The time CTAs 0..ctas-1 have spent coding tiles of one op (0 encode, 1 decode), summed.
inline uint64_t service_tile_ns(const ServiceHost* h, int ctas, int op) {
  uint64_t t = 0;
  for (int c = 0; c < ctas && c < kServiceMaxCtas; ++c) t += __atomic_load_n(&h->tile_ns[c][op], __ATOMIC_RELAXED);
  return t;
}
// The SMs CTAs 0..ctas-1 of the last launch ran on: how many different ones (0: not known).
inline int service_sms(const ServiceHost* h, int ctas) {
  uint32_t seen[kServiceMaxCtas];
  int n = 0;
  for (int c = 0; c < ctas && c < kServiceMaxCtas; ++c) {
    const uint32_t s = __atomic_load_n(&h->sm[c], __ATOMIC_RELAXED);
    bool dup = s == 0;
    for (int i = 0; i < n && !dup; ++i) dup = seen[i] == s;
    if (!dup) seen[n++] = s;
  }
  return n;
}
// True once job `index` is done, its result in *r and, where t is given, its times in *t.
inline bool service_poll(const ServiceHost* h, uint64_t index, Result* r, JobTimes* t = nullptr) {
  if (!__atomic_load_n(&h->results[index % kServiceRing].done, __ATOMIC_ACQUIRE)) return false;
  *r = h->results[index % kServiceRing];
  if (t) *t = h->times[index % kServiceRing];
  return true;
}

}  // namespace zipccl::gpu
