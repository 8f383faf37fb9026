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

namespace zip {

// One per NCCL communicator (v11 init), or one for the process (v8-v10, which have no context).
struct NetCtx {
  uint64_t comm_id = 0;
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
  std::unique_ptr<MemReg> reg;  // the transport's registration (RDMA keys), if it needs one
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
};

class Comm {
 public:
  enum Kind { kSend, kRecv };
  Comm(Kind kind, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn);
  virtual ~Comm();
  Kind kind() const { return kind_; }
  std::mutex& mutex() { return mu_; }
  Conn& conn() { return *conn_; }
  virtual ncclResult_t test(Request* r, int* done, int* sizes) = 0;
  // Folds this connection's counters into its communicator's and logs its summary.
  void log_summary();

 protected:
  // Sticky failure of this connection: logs once, returns the code for every later call.
  ncclResult_t fail(ncclResult_t code, const std::string& why);
  // The transport's error, if any, as a failure of this connection.
  ncclResult_t check_conn();

  // The codec engine for buffers of this kind, or null: such buffers always travel raw. This is
  // where the GPU codec engine plugs in for device memory.
  CodecEngine* engine_for(MemKind kind) const { return kind == MemKind::kHost ? cpu_codec_ : nullptr; }
  // Lets every engine in use complete jobs that need this thread (GPU events).
  void poll_engines() { cpu_codec_->poll(); }

  const Kind kind_;
  std::shared_ptr<NetCtx> ctx_;  // outlives finalize() if NCCL closes comms after it
  std::unique_ptr<Conn> conn_;
  CodecEngine* cpu_codec_;
  StagingPool staging_;
  Stats stats_;
  ncclResult_t failed_ = ncclSuccess;
  std::mutex mu_;  // NCCL's service and progress threads may both touch a comm
};

}  // namespace zip
