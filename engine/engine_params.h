// The engine's knobs: when and how to compress, which transport and which memory paths.
#pragma once

#include "param.h"

namespace zipccl {

enum class ZipMode : int { kOff = 0, kAuto = 1, kAlways = 2 };
enum class TransportKind : int { kAuto, kSocket, kIb };

// NCCL_ZIP_ENABLE: 0 off (a plain transport), 1 auto (default), 2 always.
ZipMode zip_mode();
// NCCL_ZIP_TRANSPORT: auto (ib when a device is usable), socket or ib.
TransportKind transport_kind();
// NCCL_ZIP_MAX_RATIO_PCT / 100: send raw when compressed/raw exceeds this.
double max_ratio();

ZIP_PARAM(min_bytes, "NCCL_ZIP_MIN_BYTES", 64 << 10, 0, int64_t(1) << 40)  // smaller messages go raw (auto)
ZIP_PARAM(cpu_threads, "NCCL_ZIP_CPU_THREADS", 1, 1, 64)  // CPU codec workers, process-wide
ZIP_PARAM(link_mbps, "NCCL_ZIP_LINK_MBPS", 0, 0, int64_t(1) << 30)  // link speed override (0: the device's)
ZIP_PARAM(checksum, "NCCL_ZIP_CHECKSUM", 0, 0, 1)  // CRC32C of each compressed message
// The GPU codec, where a CUDA device exists. 1: host buffers (NCCL's pinned ones, pinned
// staging) coded by the resident kernel when it runs, by the CPU otherwise; no CUDA call on
// NCCL's progress thread. 0: the CPU codes everything.
ZIP_PARAM(gpu_enabled, "NCCL_ZIP_GPU", 1, 0, 1)
// Per GPU: the resident codec's pinned staging arena, shared by the process's comms on it. A
// communicator of 8 channels keeps up to 8 messages in flight on each of its 16 comms, each with
// up to 512 KiB of staging: 64 MiB; this holds two such without falling back to raw.
ZIP_PARAM(gpu_staging_mb, "NCCL_ZIP_GPU_STAGING_MB", 256, 1, 1 << 16)
// CTAs the resident kernel occupies; 0: sized to the link (resident_gpus.h).
ZIP_PARAM(gpu_ctas, "NCCL_ZIP_GPU_CTAS", 0, 0, 1024)
// Its CTAs packed this many to an SM (a green context of CTAs / this many SMs; where the driver
// makes none, spread one to an SM): two overlap their waits on memory, coding about as fast as
// twice the SMs would one to an SM (docs/gpu-codec.md). 1: spread.
ZIP_PARAM(gpu_ctas_per_sm, "NCCL_ZIP_GPU_CTAS_PER_SM", 2, 1, 2)
// With the GPU codec: NCCL_MIN_NCHANNELS, where the user set none. On one channel NCCL's
// pipeline waits for each message's encode and decode; more channels keep more messages in
// flight (docs/benchmarks.md). 0 leaves NCCL's choice alone.
ZIP_PARAM(gpu_min_channels, "NCCL_ZIP_GPU_MIN_CHANNELS", 8, 0, 64)
// The resident kernel exits after this long without work: the longest an application's
// cudaDeviceSynchronize or cudaFree waits for it (torch.cuda.synchronize() after each small
// collective: the whole idle time added to each), against a restart (~10 us launch) per gap.
ZIP_PARAM(gpu_idle_us, "NCCL_ZIP_GPU_IDLE_US", 50, 0, 10000000)
// Auto mode: an isend or irecv that finds the resident kernel stopped waits this long for it to
// start (NCCL retries the call) before its message goes raw; after a wait in vain not again for
// 1 ms, doubling up to 100 ms (cold_wait.h), so a launcher that never starts it costs a comm one
// wait in 100 ms. 0: never wait, and a collective that fits in the receives NCCL posts at once (a
// DDP bucket) goes raw whenever the kernel was idle before it.
ZIP_PARAM(gpu_wait_us, "NCCL_ZIP_GPU_WAIT_US", 200, 0, 1000000)
// 1: a collective the tuner sends compressed starts the resident kernel from the application's
// thread as NCCL enqueues it (a wake-up of the launcher, no CUDA call there), so that the start
// overlaps NCCL's launch instead of waiting for its first isend/irecv; it stays the start grace.
ZIP_PARAM(gpu_prewarm, "NCCL_ZIP_GPU_PREWARM", 0, 0, 1)
// A CPU thread plays the resident kernel (CPU codec; tests without a GPU). 2: its launches hang
// until the codec closes, as a launcher stuck in a CUDA call.
ZIP_PARAM(gpu_emulate, "NCCL_ZIP_GPU_EMULATE", 0, 0, 2)
// Tests: the emulated kernel starts running this long after its launch (a GPU busy with work).
ZIP_PARAM(gpu_emulate_start_us, "NCCL_ZIP_GPU_EMULATE_START_US", 0, 0, 10000000)
// A request still not done after this many seconds is logged once (0: never).
ZIP_PARAM(stall_warn_s, "NCCL_ZIP_STALL_WARN_S", 60, 0, 24 * 3600)
// Device buffers moved by the HCA itself (GPUDirect RDMA, always raw): -1 auto, 0 off, 1 on.
ZIP_PARAM(gdr_mode, "NCCL_ZIP_GDR", -1, -1, 1)
// NCCL's buffer sizes, by which v8 receive buffers of LL and LL128 are recognised.
ZIP_PARAM(ll_buffsize, "NCCL_LL_BUFFSIZE", 524288, 0, int64_t(1) << 40)
ZIP_PARAM(ll128_buffsize, "NCCL_LL128_BUFFSIZE", 4915200, 0, int64_t(1) << 40)

}  // namespace zipccl
