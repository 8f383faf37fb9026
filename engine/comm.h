// What NCCL's send and receive comms share: the link, the codec engines, staging, sticky failure
// and stall reports, and the base of every request NCCL holds.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "clock.h"
#include "codec_engine.h"
#include "cold_wait.h"
#include "net_context.h"
#include "registration.h"
#include "staging_pool.h"
#include "stats.h"
#include "timeline.h"
#include "transport.h"

namespace zipccl {

class Comm;
struct ResidentGpu;
struct Request {
  Comm* comm;
  bool flush = false;     // a receive side's iflush, not a transfer
  int64_t posted_ms = 0;  // when isend/irecv returned it
  bool stall_logged = false;
};

class Comm {
 public:
  enum Kind { kSend, kRecv };
  Comm(Kind kind, int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Link> link);
  virtual ~Comm();
  Kind kind() const { return kind_; }
  int dev() const { return dev_; }  // the plugin device it was made on
  std::mutex& mutex() { return mu_; }
  Link& link() { return *link_; }
  virtual ncclResult_t test(Request* r, int* done, int* sizes) = 0;
  // Folds this comm's counters into its communicator's and logs its summary.
  void log_summary();
  // What the closing summary adds: the rates the policy saw (and a receiver's staging offers).
  virtual std::string details() const = 0;
  // Host memory the GPU maps is registered: the resident GPU codec of the thread's device (NCCL's
  // service thread: the communicator's GPU) and its staging arena are taken by the first such
  // registration. False when there is none (logged once). Call with mutex() held.
  bool use_resident();
  // A device buffer was registered (GPUDirect RDMA) while the resident codec is on: the codec
  // (use_resident()) and its device staging, registered whole with this comm's link now (dev: the
  // link's device, whose receives may need flushing), code it. False when either is missing
  // (logged once): its messages go raw. Call with mutex() held.
  bool use_resident_device(const DeviceInfo& dev);
  // A host buffer the GPU does not map was registered while the resident codec is on: logged
  // once per comm (its messages are coded by the CPU).
  void note_unmapped(const void* data, size_t size, int cuda_type);

 protected:
  // Sticky failure of this comm: logs once, returns the code for every later call.
  ncclResult_t fail(ncclResult_t code, const std::string& why);
  // The link's error, if any, as a failure of this comm.
  ncclResult_t check_link();
  // A request NCCL still tests after NCCL_ZIP_STALL_WARN_S is logged once, with its state, so a
  // hang can be told apart from a slow peer. describe() is called only then.
  template <class F>
  void log_if_stalled(Request* r, F describe) {
    if (r->stall_logged || stall_warn_ms_ <= 0 || now_ms() - r->posted_ms < stall_warn_ms_) return;
    r->stall_logged = true;
    log_stall(describe());
  }
  void log_stall(const std::string& state);

  // The codec engine for a registered buffer; none for unregistered memory, or device memory
  // (GPUDirect RDMA) the resident codec does not code, which is always raw.
  CodecEngine* engine_for(const Mr* mr) const {
    if (!mr) return nullptr;
    if (mr->kind == MemKind::kDevice) return mr->gpu_mapped ? resident_ : nullptr;
    return mr->gpu_mapped && resident_ ? resident_ : cpu_codec_;
  }
  // Where compressed messages of memory of kind k are staged.
  StagingPool& staging(MemKind k) { return k == MemKind::kDevice ? device_staging_ : staging_; }
  // Lets every engine in use complete jobs that need this thread (resident results).
  void poll_engines() {
    cpu_codec_->poll();
    if (resident_) resident_->poll();
  }
  // Auto mode, `engine` the resident GPU codec and its kernel not running: true while this call
  // should return no request (NCCL retries it) to let the kernel start, rather than move its
  // message raw (cold_wait.h).
  bool wait_for_kernel(CodecEngine* engine);
  // ", waited for a cold kernel N times (M in vain)" for the close line; empty before any wait.
  std::string kernel_waits() const;
  // Waits until the engines have finished or dropped `job` (teardown only).
  void cancel_and_wait(CodecJob* job);
  // ", <name> <rate> GB/s" for the codec engine in use and op, where measured.
  std::string codec_rate(CodecJob::Op op) const;
  void mark(Timeline::Event e, uint32_t seq, uint32_t sub, uint64_t bytes, uint8_t flags = 0) {
    if (timeline_) timeline_->add(e, seq, sub, bytes, flags);
  }
  // kCoded for a finished job, with its GPU times where the resident codec coded it.
  void mark_coded(const CodecJob& j, uint32_t seq, uint32_t sub, uint64_t bytes, bool compressed) {
    if (!timeline_) return;
    timeline_->add(Timeline::kCoded, seq, sub, bytes,
                   (compressed ? Timeline::kCompressed : 0) | (j.on_gpu ? Timeline::kOnGpu : 0));
    if (j.on_gpu) timeline_->add_gpu(j.gpu_times, seq, sub, bytes);
  }

  const Kind kind_;
  const int dev_;
  std::shared_ptr<NetCtx> ctx_;  // outlives finalize() if NCCL closes comms after it
  std::unique_ptr<Link> link_;
  CodecEngine* cpu_codec_;
  CodecEngine* resident_ = nullptr;  // the resident GPU codec's engine, host buffers it maps
  int resident_device_ = -1;
  bool resident_failed_ = false;
  bool unmapped_logged_ = false;
  const ResidentGpu* resident_gpu_ = nullptr;  // resident_'s, with its device staging arena
  bool device_tried_ = false;  // use_resident_device() has been asked
  bool flush_staging_ = false;  // receives into device staging are flushed before they are decoded
  StagingPool staging_;  // host buffers' compressed messages
  StagingPool device_staging_;  // device buffers' (GPUDirect RDMA)
  Stats stats_;
  std::unique_ptr<Timeline> timeline_;  // NCCL_ZIP_TIMELINE
  ncclResult_t failed_ = ncclSuccess;
  const int64_t stall_warn_ms_;
  ColdWait cold_wait_;  // NCCL_ZIP_GPU_WAIT_US
  std::mutex mu_;  // NCCL's service and progress threads may both touch a comm
};

}  // namespace zipccl
