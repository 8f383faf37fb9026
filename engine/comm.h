// What the send and receive sides share: the communicator context, registered memory, the staging
// pool for compressed bytes, and the base of every request NCCL holds.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codec_engine.h"
#include "stats.h"
#include "status.h"
#include "transport.h"

namespace zipccl {

// One per NCCL communicator (v11 init), or one for the process (v8-v10, which have no context).
struct NetCtx {
  uint64_t comm_id = 0;
  int traffic_class = -1;  // v11 init config: the communicator's connections' traffic class
  // v11 setNetAttr: the collective being progressed now uses LL or LL128 (NCCL polls flags in
  // the receive buffer), so its receives must not get compressed bytes.
  std::atomic<bool> attr_flag_polled{false};
  Stats totals;
};

struct Mr {
  char* base;
  size_t size;
  MemKind kind;
  // NCCL's kernel polls flags inside this buffer (LL/LL128): recognised by size, since NCCL
  // registers each protocol's buffer separately with NCCL_LL_BUFFSIZE / NCCL_LL128_BUFFSIZE bytes.
  bool flag_polled;
  // Device memory: a pinned host buffer of the same size, allocated at registration. A message
  // at base + o is staged at mirror + o (sent raw, compressed, or received), so the data path
  // never allocates pinned memory: cudaHostAlloc may synchronise the device, and NCCL's kernel
  // may be waiting for this very message.
  char* mirror;
  // Device memory the transport moves itself (GPUDirect RDMA): no mirror, always raw, and
  // receives into it are flushed when NCCL asks (iflush).
  bool direct;
  // Receives into it are flushed when NCCL asks (iflush): direct memory on a transport that
  // needs it.
  bool flushed;
  // The staging of a message of `bytes` at `data`, or null when it lies outside this buffer.
  char* mirror_of(const void* data, size_t bytes) const {
    const char* p = static_cast<const char*>(data);
    if (!mirror || p < base || bytes > size || size_t(p - base) > size - bytes) return nullptr;
    return mirror + (p - base);
  }
  // The transport's registration (RDMA keys) of what goes on the wire: the buffer itself, or
  // for device memory its mirror. Null for transports that need none.
  std::unique_ptr<MemReg> reg;
};

// Reusable host buffers for compressed bytes, so the data path does not allocate once warm.
// Each is registered with the connection's transport while it exists.
class StagingPool {
 public:
  explicit StagingPool(Conn* conn) : conn_(conn) {}
  struct Buf {
    std::unique_ptr<char[]> p;
    size_t cap = 0;
    std::unique_ptr<MemReg> reg;
  };
  Buf take(size_t bytes);
  void give(Buf b);
  size_t held_bytes() const { return held_; }

 private:
  // (Re)allocates b's memory, registration first released and then renewed.
  void allocate(Buf* b, size_t bytes);

  Conn* conn_;
  std::vector<Buf> free_;
  size_t held_ = 0;  // bytes allocated, in use or free
};

class Comm;
struct Request {
  Comm* comm;
  bool flush = false;  // a receive side's iflush, not a transfer
  int64_t posted_ms = 0;  // when isend/irecv returned it
  bool stall_logged = false;
};

class Comm {
 public:
  enum Kind { kSend, kRecv };
  Comm(Kind kind, int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn);
  virtual ~Comm();
  Kind kind() const { return kind_; }
  int dev() const { return dev_; }  // the plugin device it was made on
  std::mutex& mutex() { return mu_; }
  Conn& conn() { return *conn_; }
  virtual ncclResult_t test(Request* r, int* done, int* sizes) = 0;
  // Folds this connection's counters into its communicator's and logs its summary.
  void log_summary();
  // Device memory of CUDA device `device` is registered: its GPU engine is acquired by the first
  // registration (NCCL's service thread, device current). False (logged) when there is none or
  // the comm already uses another device. Call with mutex() held.
  bool use_device(int device);

 protected:
  // Sticky failure of this connection: logs once, returns the code for every later call.
  ncclResult_t fail(ncclResult_t code, const std::string& why);
  // The transport's error, if any, as a failure of this connection.
  ncclResult_t check_conn();
  // A request NCCL still tests after NCCL_ZIP_STALL_WARN_S is logged once, with its state, so a
  // hang can be told apart from a slow peer. describe() is called only then.
  template <class F>
  void log_if_stalled(Request* r, F describe) {
    if (r->stall_logged || stall_warn_ms_ <= 0 || now_ms() - r->posted_ms < stall_warn_ms_) return;
    r->stall_logged = true;
    log_stall(describe());
  }
  static int64_t now_ms();
  void log_stall(const std::string& state);

  // The codec engine for a registered buffer (device memory: the GPU engine, which also copies
  // raw messages between device memory and their pinned mirror); none for unregistered memory or
  // memory the transport moves itself (GPUDirect RDMA), which is always raw.
  CodecEngine* engine_for(const Mr* mr) const {
    if (!mr || mr->direct) return nullptr;
    return mr->kind == MemKind::kHost ? cpu_codec_ : gpu_codec_;
  }
  // Lets every engine in use complete jobs that need this thread (GPU events) and launch queued ones.
  void poll_engines() {
    cpu_codec_->poll();
    if (gpu_codec_) gpu_codec_->poll();
  }

  const Kind kind_;
  const int dev_;
  std::shared_ptr<NetCtx> ctx_;  // outlives finalize() if NCCL closes comms after it
  std::unique_ptr<Conn> conn_;
  CodecEngine* cpu_codec_;
  CodecEngine* gpu_codec_ = nullptr;
  int gpu_device_ = -1;
  StagingPool staging_;  // host buffers' compressed messages
  Stats stats_;
  ncclResult_t failed_ = ncclSuccess;
  const int64_t stall_warn_ms_;
  std::mutex mu_;  // NCCL's service and progress threads may both touch a comm
};

}  // namespace zipccl
