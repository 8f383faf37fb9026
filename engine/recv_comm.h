// Receiver side of a connection. irecv advertises its buffers in one clear-to-send record (and
// whether each may receive compressed bytes); each DataHeader that comes back says where the
// payload goes: straight into NCCL's buffer (raw) or into staging, decoded into NCCL's buffer on
// the codec engine before the receive completes with the uncompressed size. Device buffers
// receive into their pinned mirror (Mr::mirror_of); the GPU engine decodes from there into them
// or copies raw bytes; GPUDirect buffers (Mr::direct) receive raw bytes in place.
#pragma once

#include "comm.h"
#include "proto.h"

namespace zipccl {

class RecvComm : public Comm {
 public:
  RecvComm(int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn);
  ~RecvComm() override;

  // flag_polled: NCCL preset *request to NCCL_NET_OPTIONAL_RECV_COMPLETION (LL/LL128, v9+).
  ncclResult_t irecv(int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                     bool flag_polled, void** request);
  ncclResult_t test(Request* r, int* done, int* sizes) override;
  // A GPUDirect flush of the device buffer holding `data` (registered direct).
  ncclResult_t iflush(const void* data, void** request);

 private:
  enum SubState { kWaitHeader, kReceiving, kDecoding, kDone };  // kDecoding: any engine job
  struct Sub {
    SubState state = kWaitHeader;
    char* data = nullptr;
    size_t capacity = 0;
    bool compress_ok = false;
    bool compressed = false;
    size_t orig_bytes = 0, wire_bytes = 0;
    size_t staging_bytes = 0;  // largest compressed message accepted (advertised in the CTS)
    StagingPool::Buf stage;    // host buffers: a compressed message
    char* mirror = nullptr;    // device buffers: where every message lands first
    MemKind kind = MemKind::kHost;
    CodecEngine* engine = nullptr;  // decodes into this buffer's memory kind; null: raw only
    Xfer xfer;
    CodecJob job;
  };
  struct Req : Request {
    bool in_use = false;
    uint32_t seq = 0;
    uint32_t n = 0;
    Sub subs[proto::kMaxRecvs];
  };

  ncclResult_t progress();
  ncclResult_t on_header(const proto::DataHeader& h);
  ncclResult_t advance(Req* r);

  struct FlushReq : Request {
    bool in_use = false;
    Xfer xfer;
  };

  Req reqs_[proto::kMaxRequests];  // slot = seq % kMaxRequests
  // NCCL flushes a receive after test() freed its request: no more than kMaxRequests at once.
  FlushReq flushes_[proto::kMaxRequests];
  uint32_t next_seq_ = 0;
  uint32_t awaiting_headers_ = 0;  // subs in kWaitHeader: read the control channel only then
};

}  // namespace zipccl
