#include "param.h"

#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "log.h"

namespace zip {
namespace {

constexpr int kMaxThreads = 16;  // NCCL's socket transport limits
constexpr int kMaxSockets = 64;

int64_t env_int(const char* name, int64_t def, int64_t lo, int64_t hi) {
  const char* s = std::getenv(name);
  if (!s || !*s) return def;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 0);
  if (errno || *end || v < lo || v > hi) {
    ZIP_WARN("ignoring %s=%s (expected an integer in [%lld, %lld]), using %lld", name, s,
             (long long)lo, (long long)hi, (long long)def);
    return def;
  }
  ZIP_INFO(NCCL_ENV, "%s set to %lld", name, v);
  return v;
}

std::string env_str(const char* name) {
  const char* s = std::getenv(name);
  return s ? s : "";
}

TransportKind env_transport() {
  const std::string s = env_str("NCCL_ZIP_TRANSPORT");
  if (s.empty() || s == "auto") return TransportKind::kAuto;
  if (s == "socket") return TransportKind::kSocket;
  if (s == "ib") return TransportKind::kIb;
  ZIP_WARN("ignoring NCCL_ZIP_TRANSPORT=%s (expected ib, socket or auto), using auto", s.c_str());
  return TransportKind::kAuto;
}

// NCCL_IB_MTU in bytes; 0 when unset. IB MTUs are powers of two from 256 to 4096.
int env_mtu() {
  const int v = int(env_int("NCCL_IB_MTU", 0, 0, 4096));
  if (v == 0 || (v >= 256 && (v & (v - 1)) == 0)) return v;
  ZIP_WARN("ignoring NCCL_IB_MTU=%d (expected 256, 512, 1024, 2048 or 4096)", v);
  return 0;
}

Params load() {
  Params p;
  p.mode = static_cast<ZipMode>(env_int("NCCL_ZIP_ENABLE", 1, 0, 2));
  p.min_bytes = env_int("NCCL_ZIP_MIN_BYTES", 64 << 10, 0, int64_t(1) << 40);
  p.max_ratio = double(env_int("NCCL_ZIP_MAX_RATIO_PCT", 95, 1, 100)) / 100.0;
  p.cpu_threads = int(env_int("NCCL_ZIP_CPU_THREADS", 1, 1, 64));
  p.link_mbps = env_int("NCCL_ZIP_LINK_MBPS", 0, 0, int64_t(1) << 30);
  p.handshake_timeout_ms = env_int("NCCL_ZIP_HANDSHAKE_TIMEOUT_MS", 10000, 1, 3600 * 1000);
  p.socket_timeout_ms = env_int("NCCL_ZIP_SOCKET_TIMEOUT_MS", 30000, 0, 3600 * 1000);
  p.checksum = env_int("NCCL_ZIP_CHECKSUM", 0, 0, 1) != 0;
  p.gpu = env_int("NCCL_ZIP_GPU", 0, 0, 1) != 0;
  p.gpu_staging_mb = env_int("NCCL_ZIP_GPU_STAGING_MB", 64, 1, 1 << 16);
  p.stall_warn_ms = env_int("NCCL_ZIP_STALL_WARN_S", 60, 0, 24 * 3600) * 1000;
  p.socket_ifname = env_str("NCCL_SOCKET_IFNAME");
  p.socket_family = env_str("NCCL_SOCKET_FAMILY");
  p.socket_nthreads = int(env_int("NCCL_SOCKET_NTHREADS", 2, 1, kMaxThreads));
  p.nsocks_per_thread = int(env_int("NCCL_NSOCKS_PERTHREAD", 2, 1, kMaxSockets));
  if (p.socket_nthreads * p.nsocks_per_thread > kMaxSockets) {
    p.nsocks_per_thread = kMaxSockets / p.socket_nthreads;
    ZIP_WARN("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD exceeds %d sockets; using %d per thread",
             kMaxSockets, p.nsocks_per_thread);
  }
  p.ll_buffsize = env_int("NCCL_LL_BUFFSIZE", 524288, 0, int64_t(1) << 40);
  p.ll128_buffsize = env_int("NCCL_LL128_BUFFSIZE", 4915200, 0, int64_t(1) << 40);
  p.transport = env_transport();
  p.ib_timeout = int(env_int("NCCL_IB_TIMEOUT", 20, 1, 31));
  p.ib_retry_cnt = int(env_int("NCCL_IB_RETRY_CNT", 7, 0, 7));
  p.ib_tc = int(env_int("NCCL_IB_TC", 0, 0, 255));
  p.ib_sl = int(env_int("NCCL_IB_SL", 0, 0, 15));
  p.ib_qps_per_conn = int(env_int("NCCL_IB_QPS_PER_CONNECTION", 1, 1, kMaxQpsPerConn));
  p.ib_pkey_index = int(env_int("NCCL_IB_PKEY", 0, 0, 0xFFFF));
  p.ib_mtu = env_mtu();
  p.ib_merge_vfs = env_int("NCCL_IB_MERGE_VFS", 1, 0, 1) != 0;
  p.gdr = int(env_int("NCCL_ZIP_GDR", -1, -1, 1));
  p.ib_gdr_flush_disable = env_int("NCCL_IB_GDR_FLUSH_DISABLE", 0, 0, 1) != 0;
  p.ib_relaxed_ordering = int(env_int("NCCL_IB_PCI_RELAXED_ORDERING", 2, 0, 2));
  return p;
}

}  // namespace

const Params& params() {
  static std::once_flag once;
  static Params p;
  std::call_once(once, [] { p = load(); });
  return p;
}

}  // namespace zip
