// Sending end of a connection. Per message: match the receiver's next clear-to-send by tag, decide
// raw or compressed, compress on a codec engine into staging, then send it into the placement it
// matched; done once the link has taken every byte. Messages go to the link in (seq, sub) order,
// whatever order their isends and codec jobs came in. Device buffers (GPUDirect RDMA) go raw
// from where they are. A small raw message with no clear-to-send yet goes at once where the link
// allows it (Link::post_eager) and takes its placement when the clear-to-send comes.
#pragma once

#include <deque>
#include <vector>

#include "comm.h"
#include "link_backlog.h"
#include "link_meter.h"
#include "policy.h"

namespace zipccl {

class SendComm : public Comm {
 public:
  SendComm(int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Link> link, double link_bytes_per_s);
  ~SendComm() override;

  ncclResult_t isend(void* data, size_t size, int tag, Mr* mr, void** request);
  ncclResult_t test(Request* r, int* done, int* sizes) override;
  std::string details() const override;

 private:
  enum State { kFree, kCoding, kReady, kPosted };  // kCoding: any engine job
  struct Req : Request {
    State state = kFree;
    const char* data = nullptr;
    size_t size = 0;
    MemKind kind = MemKind::kHost;  // for stall reports
    MessageHeader h;
    const char* wire = nullptr;  // what goes on the wire: data or staging
    size_t staging_cap = 0;      // what the receiver takes compressed (its placement's staging_bytes)
    StagingPool::Buf stage;      // the compressed message
    CodecEngine* leased = nullptr;  // holds this engine's lease() until the encode is done
    CodecJob job;
    Xfer xfer;
    int64_t wire_ns = 0;  // when it went to the link
    int64_t backlog = 0;  // its wire bytes in the device's LinkBacklog
    bool eager = false;   // sent ahead of its clear-to-send: h.seq is its index, h.sub kMaxRecvs
  };
  // A clear-to-send until all its messages are with the link.
  struct Pending {
    ClearToSend cts;
    uint32_t matched = 0;  // bit i: placement i has its isend
    Req* req[kMaxRecvs] = {};  // null where matched: its message went ahead of this clear-to-send
  };
  // A message sent ahead of its clear-to-send (Link::post_eager), until that comes.
  struct Eager {
    uint32_t index;
    int tag;
    size_t size;
  };
  static constexpr size_t kPool = kMaxRequests * kMaxRecvs;
  static void end_lease(Req* r);

  ncclResult_t progress();
  ncclResult_t take_cts();
  // Gives the messages sent ahead of clear-to-send p their placements in it (the rule of
  // Link::post_eager); where every placement of p had its message pushed, fills them all.
  ncclResult_t match_eager(Pending* p);
  // Placement sub of p has its message; the next isend matches the next clear-to-send once all
  // of p's have.
  void fill(Pending* p, uint32_t sub);
  // A raw message sent before its clear-to-send, when the link and the policy allow it, or at
  // once while the receiver says push (*sent).
  ncclResult_t send_eager(void* data, size_t size, int tag, Mr* mr, bool push, void** request, bool* sent);
  // A free request for a message from data (the caller has checked that there is one), raw until
  // said otherwise.
  Req* take_req(const void* data, size_t size, MemKind kind, uint32_t seq, uint32_t sub, RawWhy why);
  // r's message is with the link now (post_message or post_eager): its time, mark and stats.
  void went_to_link(Req* r);
  void count_backlog(Req* r, int64_t wire_bytes);  // r's bytes in backlog_ become wire_bytes
  ncclResult_t defer(size_t size, int tag);
  ncclResult_t finish_job(Req* r);
  // Wire bytes of the messages taken from NCCL and not yet through the link.
  uint64_t bytes_ahead() const;

  LinkMeter* const meter_;  // this device's link, all comms through it
  LinkBacklog* const backlog_;
  CompressPolicy policy_;
  uint64_t cold_ = 0;  // messages auto mode would have compressed but the GPU codec's kernel was not running
  uint64_t unstaged_ = 0;  // device buffers' messages it would have compressed but the device arena was full
  uint64_t unoffered_ = 0;  // messages auto mode would have compressed but their receive offered no staging
  std::unique_ptr<Req[]> reqs_;
  std::vector<Req*> free_;
  std::deque<Pending> pending_;  // oldest first
  size_t matching_ = 0;          // pending_[matching_] is the first not fully matched
  uint32_t posted_subs_ = 0;     // messages of pending_.front() with the link
  uint32_t next_index_ = 0;      // isends taken: the placement number of the next (Link::post_eager)
  // Oldest first; once pushed, only the last kMaxRecvs: all that a clear-to-send with placements
  // left to fill can name.
  std::deque<Eager> eager_;
  bool pushing_ = false;          // the receiver's last word: push (ClearToSend n = 0)
  bool push_bounded_ = false;     // ... up to placement push_until_ only
  uint32_t push_until_ = 0;
  uint64_t sent_eager_ = 0, pushed_ = 0;
  Request deferred_{};           // since when isend has been returning no request (0: it has not)
};

}  // namespace zipccl
