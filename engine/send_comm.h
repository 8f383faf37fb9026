// Sender side of a connection. Per message: match the receiver's next clear-to-send entry by tag,
// decide raw or compressed, compress on the codec engine into staging, then (in isend order)
// send the DataHeader and post the payload; done once the transport has taken every byte.
// Device buffers always pass through the GPU engine (the socket cannot read device memory): it
// leaves the compressed message or the raw bytes in the buffer's pinned mirror (Mr::mirror_of).
#pragma once

#include <deque>

#include "comm.h"
#include "policy.h"
#include "proto.h"

namespace zipccl {

class SendComm : public Comm {
 public:
  SendComm(int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn, double link_bytes_per_s);
  ~SendComm() override;

  ncclResult_t isend(void* data, size_t size, int tag, Mr* mr, void** request);
  ncclResult_t test(Request* r, int* done, int* sizes) override;

 private:
  enum State { kFree, kCompressing, kReady, kPosted };  // kCompressing: any engine job
  struct Req : Request {
    State state = kFree;
    const char* data = nullptr;
    size_t size = 0;
    MemKind kind = MemKind::kHost;
    uint32_t seq = 0, sub = 0;
    bool compressed = false;
    const char* wire = nullptr;
    size_t wire_bytes = 0;
    size_t staging_cap = 0;     // what the receiver can take compressed (its CTS staging_bytes)
    StagingPool::Buf stage;     // host buffers: the compressed message
    char* mirror = nullptr;     // device buffers: the message's pinned mirror (Mr::mirror_of)
    CodecJob job;
    Xfer xfer;
  };
  struct CtsSlot {
    proto::Cts cts;
    uint32_t matched;  // bit i: entry i has its isend
  };
  static constexpr size_t kPool = proto::kMaxRequests * proto::kMaxRecvs;

  ncclResult_t progress();
  ncclResult_t read_cts();
  ncclResult_t defer(size_t size, int tag);
  ncclResult_t finish_job(Req* r);

  CompressPolicy policy_;
  std::unique_ptr<Req[]> reqs_;
  std::vector<Req*> free_;
  std::deque<CtsSlot> fifo_;   // clear-to-send records not fully matched yet, oldest first
  uint32_t next_cts_seq_ = 0;
  Request deferred_{};  // since when isend has been returning no request (0: it has not)
  std::deque<Req*> unposted_;  // in isend order: payloads go out in this order
};

}  // namespace zipccl
