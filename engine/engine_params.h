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
// Device buffers staged through pinned mirrors and coded by the GPU codec (experimental: CUDA
// calls on NCCL's proxy thread, docs/plugin.md).
ZIP_PARAM(gpu_enabled, "NCCL_ZIP_GPU", 0, 0, 1)
ZIP_PARAM(gpu_staging_mb, "NCCL_ZIP_GPU_STAGING_MB", 64, 1, 1 << 16)  // device scratch per GPU
// A request still not done after this many seconds is logged once (0: never).
ZIP_PARAM(stall_warn_s, "NCCL_ZIP_STALL_WARN_S", 60, 0, 24 * 3600)
// Device buffers moved by the HCA itself (GPUDirect RDMA, always raw): -1 auto, 0 off, 1 on.
ZIP_PARAM(gdr_mode, "NCCL_ZIP_GDR", -1, -1, 1)
// NCCL's buffer sizes, by which v8 receive buffers of LL and LL128 are recognised.
ZIP_PARAM(ll_buffsize, "NCCL_LL_BUFFSIZE", 524288, 0, int64_t(1) << 40)
ZIP_PARAM(ll128_buffsize, "NCCL_LL128_BUFFSIZE", 4915200, 0, int64_t(1) << 40)

}  // namespace zipccl
