// Environment knobs, read once per process (like NCCL's NCCL_PARAM). NCCL_ZIP_* are ours; the
// NCCL_SOCKET_* / NCCL_NSOCKS_PERTHREAD / NCCL_IB_* / buffer-size ones are NCCL's, honoured with
// its meaning (the IB GID knobs and NCCL_IB_HCA are read by verbs/port_info and verbs/hca_filter).
#pragma once

#include <cstdint>
#include <string>

namespace zip {

enum class ZipMode : int { kOff = 0, kAuto = 1, kAlways = 2 };
enum class TransportKind : int { kAuto, kSocket, kIb };

constexpr int kMaxQpsPerConn = 16;

struct Params {
  ZipMode mode;                 // NCCL_ZIP_ENABLE: 0 off (plain transport), 1 auto, 2 always
  int64_t min_bytes;            // NCCL_ZIP_MIN_BYTES: smaller messages always go raw
  double max_ratio;             // NCCL_ZIP_MAX_RATIO: send raw when compressed/raw exceeds this
  int cpu_threads;              // NCCL_ZIP_CPU_THREADS: CPU codec worker threads (process-wide)
  int64_t link_mbps;            // NCCL_ZIP_LINK_MBPS: override of the link speed (0: from /sys)
  int64_t handshake_timeout_ms; // NCCL_ZIP_HANDSHAKE_TIMEOUT_MS: silent inbound sockets dropped
  int64_t socket_timeout_ms;    // NCCL_ZIP_SOCKET_TIMEOUT_MS: TCP_USER_TIMEOUT, dead-peer bound
  bool checksum;                // NCCL_ZIP_CHECKSUM: CRC32C of each compressed message
  // NCCL_ZIP_GPU=1: device buffers with the GPU codec (if built with it). Off by default: the
  // engine calls CUDA from NCCL's proxy thread, and the driver can block such a call behind an
  // application thread that waits for NCCL's kernel (docs/plugin.md, "Device buffers").
  bool gpu;
  int64_t gpu_staging_mb;       // NCCL_ZIP_GPU_STAGING_MB: device staging per GPU (process-wide)
  int64_t stall_warn_ms;        // NCCL_ZIP_STALL_WARN_S: log a request still not done after this (0: never)
  std::string socket_ifname;    // NCCL_SOCKET_IFNAME
  std::string socket_family;    // NCCL_SOCKET_FAMILY: AF_INET, AF_INET6 or empty
  int socket_nthreads;          // NCCL_SOCKET_NTHREADS
  int nsocks_per_thread;        // NCCL_NSOCKS_PERTHREAD
  int64_t ll_buffsize;          // NCCL_LL_BUFFSIZE (recognise LL receive buffers, v8)
  int64_t ll128_buffsize;       // NCCL_LL128_BUFFSIZE
  TransportKind transport;      // NCCL_ZIP_TRANSPORT: auto (ib if a device is usable), socket, ib
  int ib_timeout;               // NCCL_IB_TIMEOUT: local ACK timeout, 4.096 us x 2^value
  int ib_retry_cnt;             // NCCL_IB_RETRY_CNT
  int ib_tc;                    // NCCL_IB_TC: traffic class (RoCE GRH)
  int ib_sl;                    // NCCL_IB_SL: service level
  int ib_qps_per_conn;          // NCCL_IB_QPS_PER_CONNECTION: data striped over this many QPs
  int ib_pkey_index;            // NCCL_IB_PKEY: partition key index, as NCCL uses it
  int ib_mtu;                   // NCCL_IB_MTU: 256..4096 bytes caps the path MTU (0: the ports')
  bool ib_merge_vfs;            // NCCL_IB_MERGE_VFS: report a VF at its PF's PCI path
  // NCCL_ZIP_GDR: device buffers moved by the HCA itself (GPUDirect RDMA, raw: no codec reaches
  // them). -1 auto: where the HCA supports it, unless compression is forced (NCCL_ZIP_ENABLE=2) or
  // the GPU codec stages device buffers (NCCL_ZIP_GPU=1). docs/verbs.md, "GPUDirect RDMA".
  int gdr;
  bool ib_gdr_flush_disable;    // NCCL_IB_GDR_FLUSH_DISABLE: no RDMA-read flush after GDR receives
  int ib_relaxed_ordering;      // NCCL_IB_PCI_RELAXED_ORDERING: 0 off, 1 on, 2 auto (where the library can)
};

const Params& params();

}  // namespace zip
