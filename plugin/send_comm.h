// Sender side of a connection. Per message: match the receiver's next clear-to-send entry by tag,
// decide raw or compressed, compress on the codec engine into staging, then (in isend order)
// send the DataHeader and post the payload; done once the transport has taken every byte.
#pragma once

#include <deque>

#include "comm.h"
#include "policy.h"
#include "proto.h"

namespace zip {

class SendComm : public Comm {
 public:
  SendComm(std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn, double link_bytes_per_s);
  ~SendComm() override;

  ncclResult_t isend(void* data, size_t size, int tag, Mr* mr, void** request);
  ncclResult_t test(Request* r, int* done, int* sizes) override;

 private:
  enum State { kFree, kCompressing, kReady, kPosted };
  struct Req : Request {
    State state = kFree;
    const char* data = nullptr;
    size_t size = 0;
    uint32_t seq = 0, sub = 0;
    bool compressed = false;
    const char* wire = nullptr;
    size_t wire_bytes = 0;
    StagingPool::Buf stage;
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
  void finish_compress(Req* r);

  CompressPolicy policy_;
  std::unique_ptr<Req[]> reqs_;
  std::vector<Req*> free_;
  std::deque<CtsSlot> fifo_;   // clear-to-send records not fully matched yet, oldest first
  uint32_t next_cts_seq_ = 0;
  std::deque<Req*> unposted_;  // in isend order: payloads go out in this order
};

}  // namespace zip
