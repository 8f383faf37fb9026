// Receiving end of a connection. irecv posts one clear-to-send saying, for each grouped receive,
// where raw bytes land (NCCL's buffer) and where compressed ones do (staging), if it may receive
// them at all. Each message the link reports as arrived is then done (raw, in place) or decoded
// into NCCL's buffer on a codec engine, and the receive completes with the uncompressed sizes.
// Device buffers (GPUDirect RDMA) receive raw bytes in place, or compressed ones into device
// staging (flushed first where the HCA needs it) that the resident GPU codec decodes. In auto mode
// an OfferGate stops the offers while the sender declines them.
#pragma once

#include "comm.h"
#include "offer_gate.h"

namespace zipccl {

class RecvComm : public Comm {
 public:
  RecvComm(int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Link> link);
  ~RecvComm() override;

  // flag_polled: NCCL preset *request to NCCL_NET_OPTIONAL_RECV_COMPLETION (LL/LL128, v9+).
  ncclResult_t irecv(int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                     bool flag_polled, void** request);
  ncclResult_t test(Request* r, int* done, int* sizes) override;
  std::string details() const override;
  // A GPUDirect flush of the device buffer holding `data` (registered direct).
  ncclResult_t iflush(const void* data, void** request);

 private:
  // kLanded, kFlushing: compressed bytes in device staging, before their flush (flush_staging_).
  enum SubState { kWaiting, kLanded, kFlushing, kDecoding, kDone };
  struct Sub {
    SubState state = kWaiting;
    char* data = nullptr;
    size_t capacity = 0;
    bool compressed = false;
    size_t orig_bytes = 0, wire_bytes = 0;
    StagingPool::Buf stage;    // where compressed bytes may land
    MemKind kind = MemKind::kHost;
    bool gpu_mapped = false;  // a buffer the resident GPU codec may write
    uint32_t flush = 0;       // kFlushing: its slot in staging_flushes_
    CodecEngine* engine = nullptr;  // decodes into this buffer's memory kind; null: raw only
    bool leased = false;            // holds engine->lease() until done
    CodecJob job;
  };
  struct Req : Request {
    bool in_use = false;
    uint32_t seq = 0;
    uint32_t n = 0;
    Sub subs[kMaxRecvs];
  };
  struct FlushReq : Request {
    bool in_use = false;
    Xfer xfer;
  };

  // One flush of device staging covers every message landed before it was posted.
  struct StagingFlush {
    Xfer xfer;
    uint32_t waiting = 0;  // subs still in kFlushing on it; 0: free once xfer is done
  };
  static constexpr uint32_t kStagingFlushes = 8;

  ncclResult_t progress();
  ncclResult_t on_arrival(const MessageHeader& h);
  void submit_decode(Sub* s);
  // Flushes kLanded subs' staging, and decodes those whose flush has completed.
  ncclResult_t flush_staging();
  ncclResult_t finish_job(Req* r, Sub* s);
  // A compressed message the peer sent that cannot be right: fails the comm (remote error).
  ncclResult_t corrupt(uint32_t seq, const std::string& why);
  static void end_lease(Sub* s);

  Req reqs_[kMaxRequests];  // slot = seq % kMaxRequests
  // NCCL flushes a receive after test() freed its request: no more than kMaxRequests at once.
  FlushReq flushes_[kMaxRequests];
  StagingFlush staging_flushes_[kStagingFlushes];
  uint32_t landed_ = 0, flushing_ = 0;  // subs in kLanded, in kFlushing
  uint32_t next_seq_ = 0;
  OfferGate offers_;
  uint64_t receives_ = 0, offered_ = 0;  // posted receives, and those that offered staging
  uint64_t probes_ = 0;                  // of them, a quiet offer gate's probes
  uint64_t cold_ = 0;  // receives that would have offered but for a kernel not running (auto)
};

}  // namespace zipccl
