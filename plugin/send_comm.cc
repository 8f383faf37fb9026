#include "send_comm.h"

#include <cstring>
#include <thread>

#include "log.h"
#include "param.h"

namespace zip {

SendComm::SendComm(std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn, double link_bytes_per_s)
    : Comm(kSend, std::move(ctx), std::move(conn)), policy_(params().mode, link_bytes_per_s), reqs_(new Req[kPool]) {
  for (size_t i = 0; i < kPool; ++i) {
    reqs_[i].comm = this;
    free_.push_back(&reqs_[kPool - 1 - i]);
  }
}

SendComm::~SendComm() {
  // Nothing may still read NCCL's buffers or our staging once we return.
  for (size_t i = 0; i < kPool; ++i) {
    if (reqs_[i].state != kCompressing) continue;
    reqs_[i].job.cancel();
    while (!reqs_[i].job.done()) {
      poll_engines();
      std::this_thread::yield();
    }
  }
  conn_.reset();  // joins the transport's threads, which may still hold posted payloads
}

ncclResult_t SendComm::read_cts() {
  for (;;) {
    proto::Cts c;
    size_t len = 0;
    if (!conn_->recv_ctrl(&c, sizeof c, &len).ok()) return check_conn();
    if (len == 0) return ncclSuccess;
    if (len != sizeof c || c.type != proto::kCts || c.n == 0 || c.n > proto::kMaxRecvs ||
        c.seq != next_cts_seq_ || fifo_.size() >= proto::kMaxRequests)
      return fail(ncclRemoteError, "protocol error: unexpected clear-to-send record");
    ++next_cts_seq_;
    fifo_.push_back(CtsSlot{c, 0});
  }
}

void SendComm::finish_compress(Req* r) {
  const CodecJob& j = r->job;
  stats_.codec_ns += uint64_t(j.seconds * 1e9);
  // Pays only if coded (not the codec's raw fallback) and below NCCL_ZIP_MAX_RATIO.
  const bool pays = j.status == zipccl::Status::kOk && j.codec != zipccl::Codec::Raw &&
                    double(j.out_bytes) <= params().max_ratio * double(r->size);
  zipccl::Header h;
  if (pays) std::memcpy(&h, r->stage.p.get(), sizeof h);
  if (pays && h.codec != uint8_t(zipccl::Codec::Raw)) {
    r->compressed = true;
    r->wire = r->stage.p.get();
    r->wire_bytes = j.out_bytes;
  } else {
    r->compressed = false;
    r->wire = r->data;
    r->wire_bytes = r->size;
    staging_.give(std::move(r->stage));
  }
  policy_.record(r->size, r->wire_bytes);
  ZIP_TRACE("send seq %u: %zu bytes as %s -> %zu on the wire (%.3f ms in codec)", r->seq, r->size,
            r->compressed ? zipccl::codec_name(j.codec) : "raw", r->wire_bytes, j.seconds * 1e3);
  r->state = kReady;
}

ncclResult_t SendComm::progress() {
  if (ncclResult_t e = check_conn()) return e;
  if (!conn_->progress().ok()) return check_conn();
  poll_engines();
  while (!unposted_.empty()) {
    Req* r = unposted_.front();
    if (r->state == kCompressing) {
      if (!r->job.done()) break;
      finish_compress(r);
    }
    proto::DataHeader h{proto::kData, r->seq, r->sub, r->compressed ? uint32_t(proto::kCompressed) : 0u,
                        r->size, r->wire_bytes};
    if (!conn_->send_ctrl(&h, sizeof h).ok() || !conn_->post_send(r->wire, r->wire_bytes, &r->xfer).ok())
      return check_conn();
    stats_.messages++;
    stats_.compressed += r->compressed;
    stats_.bytes_in += r->size;
    stats_.bytes_wire += r->wire_bytes;
    r->state = kPosted;
    unposted_.pop_front();
  }
  return ncclSuccess;
}

ncclResult_t SendComm::isend(void* data, size_t size, int tag, Mr* mr, void** request) {
  *request = nullptr;
  if (ncclResult_t e = progress()) return e;
  if (ncclResult_t e = read_cts()) return e;  // clear-to-send records matter only here
  if (fifo_.empty()) {
    if (conn_->peer_closed()) return fail(ncclRemoteError, "receiver closed the connection");
    return ncclSuccess;  // the receiver has not posted this receive yet: NCCL retries
  }
  CtsSlot& slot = fifo_.front();
  uint32_t sub = 0;
  while (sub < slot.cts.n && (slot.cts.e[sub].tag != tag || (slot.matched >> sub & 1))) ++sub;
  if (sub == slot.cts.n || free_.empty()) return ncclSuccess;
  const proto::CtsEntry& e = slot.cts.e[sub];
  if (size > e.capacity)
    return fail(ncclInvalidUsage, "isend of " + std::to_string(size) + " bytes to a receive of " +
                                      std::to_string(e.capacity) + " bytes");
  Req* r = free_.back();
  free_.pop_back();
  r->data = static_cast<const char*>(data);
  r->size = size;
  r->seq = slot.cts.seq;
  r->sub = sub;
  r->compressed = false;
  r->wire = r->data;
  r->wire_bytes = size;
  CodecEngine* engine = mr ? engine_for(mr->kind) : nullptr;
  if (engine && (e.flags & proto::kCompressOk) && policy_.should_compress(size, *engine)) {
    r->stage = staging_.take(zipccl::max_compressed_bytes(size));
    CodecJob& j = r->job;
    j.state.store(CodecJob::kIdle, std::memory_order_relaxed);
    j.cancelled.store(false, std::memory_order_relaxed);
    j.op = CodecJob::kEncode;
    j.src = data;
    j.src_bytes = size;
    j.dst = r->stage.p.get();
    j.dst_cap = r->stage.cap;
    j.checksum = params().checksum;
    j.max_ratio = params().max_ratio;
    r->state = kCompressing;
    engine->submit(&j);
  } else {
    r->state = kReady;
  }
  slot.matched |= 1u << sub;
  if (slot.matched == (1u << slot.cts.n) - 1) fifo_.pop_front();
  unposted_.push_back(r);
  *request = r;
  return progress();
}

ncclResult_t SendComm::test(Request* req, int* done, int* sizes) {
  Req* r = static_cast<Req*>(req);
  *done = 0;
  if (ncclResult_t e = progress()) return e;
  // NCCL reuses its buffer as soon as we say done: every byte must be with the transport,
  // the header included.
  if (r->state != kPosted || !r->xfer.done() || conn_->ctrl_backlog() != 0) return ncclSuccess;
  *done = 1;
  if (sizes) sizes[0] = int(r->size);
  staging_.give(std::move(r->stage));
  r->state = kFree;
  free_.push_back(r);
  return ncclSuccess;
}

}  // namespace zip
