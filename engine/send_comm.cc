#include "send_comm.h"

#include <cstring>
#include <thread>

#include "log.h"
#include "engine_params.h"

namespace zipccl {

SendComm::SendComm(int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn, double link_bytes_per_s)
    : Comm(kSend, dev, std::move(ctx), std::move(conn)), policy_(zip_mode(), link_bytes_per_s), reqs_(new Req[kPool]) {
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
    if (conn_->recv_ctrl(&c, sizeof c, &len) != ncclSuccess) return check_conn();
    if (len == 0) return ncclSuccess;
    if (len != sizeof c || c.type != proto::kCts || c.n == 0 || c.n > proto::kMaxRecvs ||
        c.seq != next_cts_seq_ || fifo_.size() >= proto::kMaxRequests)
      return fail(ncclRemoteError, "protocol error: unexpected clear-to-send record");
    ++next_cts_seq_;
    fifo_.push_back(CtsSlot{c, 0});
  }
}

ncclResult_t SendComm::finish_job(Req* r) {
  const CodecJob& j = r->job;
  if (j.failed) return fail(ncclInternalError, "the GPU codec engine failed (see its warning)");
  r->state = kReady;
  const bool device = r->kind == MemKind::kDevice;
  if (j.op == CodecJob::kCopy) {  // a device message sent raw, from its mirror
    r->wire = r->mirror;
    return ncclSuccess;
  }
  stats_.codec_ns += uint64_t(j.seconds * 1e9);
  // Host: pays only if coded (not the codec's raw fallback), below NCCL_ZIP_MAX_RATIO and within
  // the receiver's staging. The GPU engine decides all three itself: the mirror holds either its
  // encoded message or the raw input.
  bool pays = j.status == zipccl::Status::kOk && j.codec != zipccl::Codec::Raw;
  if (pays && !device) {
    zipccl::Header h;
    std::memcpy(&h, r->stage.p.get(), sizeof h);
    pays = double(j.out_bytes) <= max_ratio() * double(r->size) && j.out_bytes <= r->staging_cap &&
           h.codec != uint8_t(zipccl::Codec::Raw);
  }
  r->compressed = pays;
  r->wire_bytes = pays ? j.out_bytes : r->size;
  if (device) {
    r->wire = r->mirror;
  } else if (pays) {
    r->wire = r->stage.p.get();
  } else {
    r->wire = r->data;
    staging_.give(std::move(r->stage));
  }
  policy_.record(r->size, r->wire_bytes);
  ZIP_TRACE("send seq %u: %zu bytes as %s -> %zu on the wire (%.3f ms in %s codec)", r->seq, r->size,
            r->compressed ? zipccl::codec_name(j.codec) : "raw", r->wire_bytes, j.seconds * 1e3,
            device ? "GPU" : "CPU");
  return ncclSuccess;
}

ncclResult_t SendComm::progress() {
  if (ncclResult_t e = check_conn()) return e;
  if (conn_->progress() != ncclSuccess) return check_conn();
  poll_engines();
  while (!unposted_.empty()) {
    Req* r = unposted_.front();
    if (r->state == kCompressing) {
      if (!r->job.done()) break;
      if (ncclResult_t e = finish_job(r)) return e;
    }
    proto::DataHeader h{proto::kData, r->seq, r->sub, r->compressed ? uint32_t(proto::kCompressed) : 0u,
                        r->size, r->wire_bytes};
    if (conn_->send_ctrl(&h, sizeof h) != ncclSuccess || conn_->post_send(r->wire, r->wire_bytes, &r->xfer) != ncclSuccess)
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

// isend returns no request (NCCL retries): log it if that goes on for NCCL_ZIP_STALL_WARN_S.
ncclResult_t SendComm::defer(size_t size, int tag) {
  if (deferred_.posted_ms == 0) {
    deferred_.posted_ms = now_ms();
    deferred_.stall_logged = false;
  }
  log_if_stalled(&deferred_, [&] {
    std::string s = "isend of " + std::to_string(size) + " bytes, tag " + std::to_string(tag) + " deferred: ";
    if (fifo_.empty()) return s + "no clear-to-send from the receiver (next expected seq " + std::to_string(next_cts_seq_) + ")";
    const proto::Cts& c = fifo_.front().cts;
    s += "clear-to-send seq " + std::to_string(c.seq) + " has tags";
    for (uint32_t i = 0; i < c.n; ++i) s += " " + std::to_string(c.e[i].tag) + ((fifo_.front().matched >> i & 1) ? "(matched)" : "");
    return s + ", " + std::to_string(free_.size()) + " free requests";
  });
  return ncclSuccess;
}

ncclResult_t SendComm::isend(void* data, size_t size, int tag, Mr* mr, void** request) {
  *request = nullptr;
  if (ncclResult_t e = progress()) return e;
  if (ncclResult_t e = read_cts()) return e;  // clear-to-send records matter only here
  if (fifo_.empty()) {
    if (conn_->peer_closed()) return fail(ncclRemoteError, "receiver closed the connection");
    return defer(size, tag);  // the receiver has not posted this receive yet: NCCL retries
  }
  CtsSlot& slot = fifo_.front();
  uint32_t sub = 0;
  while (sub < slot.cts.n && (slot.cts.e[sub].tag != tag || (slot.matched >> sub & 1))) ++sub;
  if (sub == slot.cts.n || free_.empty()) return defer(size, tag);
  deferred_.posted_ms = 0;
  const proto::CtsEntry& e = slot.cts.e[sub];
  if (size > e.capacity)
    return fail(ncclInvalidUsage, "isend of " + std::to_string(size) + " bytes to a receive of " +
                                      std::to_string(e.capacity) + " bytes");
  const bool device = mr && mr->kind == MemKind::kDevice;
  const bool staged = device && !mr->direct;  // through the GPU engine and the pinned mirror
  char* mirror = staged ? mr->mirror_of(data, size) : nullptr;
  if (staged && !mirror)
    return fail(ncclInvalidUsage, "isend of " + std::to_string(size) + " bytes outside its registered buffer");
  CodecEngine* engine = engine_for(mr);
  const bool compress = engine && (e.flags & proto::kCompressOk) &&
                        zipccl::max_compressed_bytes(size) <= engine->max_message_bytes() &&
                        policy_.should_compress(size, *engine);
  Req* r = free_.back();
  free_.pop_back();
  r->data = static_cast<const char*>(data);
  r->size = size;
  r->kind = device ? MemKind::kDevice : MemKind::kHost;
  r->seq = slot.cts.seq;
  r->sub = sub;
  r->compressed = false;
  r->wire = r->data;
  r->wire_bytes = size;
  r->staging_cap = e.staging_bytes;
  r->mirror = mirror;
  // Staged device memory, even raw, goes through the GPU engine to its pinned mirror: a socket
  // cannot read device memory.
  if (compress || (staged && size > 0)) {
    if (!device) r->stage = staging_.take(zipccl::max_compressed_bytes(size));
    CodecJob& j = r->job;
    j.state.store(CodecJob::kIdle, std::memory_order_relaxed);
    j.cancelled.store(false, std::memory_order_relaxed);
    j.op = compress ? CodecJob::kEncode : CodecJob::kCopy;
    j.src = data;
    j.src_bytes = size;
    j.dst = device ? mirror : r->stage.p.get();
    // Device: the mirror slot holds `size` bytes; a coded message larger than that or than the
    // receiver's staging is replaced by the raw input.
    j.dst_cap = device ? std::min<size_t>(size, e.staging_bytes) : r->stage.cap;
    j.checksum = checksum() != 0;
    j.max_ratio = max_ratio();
    r->state = kCompressing;
    engine->submit(&j);
  } else {
    r->state = kReady;
  }
  slot.matched |= 1u << sub;
  if (slot.matched == (1u << slot.cts.n) - 1) fifo_.pop_front();
  unposted_.push_back(r);
  r->posted_ms = now_ms();
  r->stall_logged = false;
  *request = r;
  return progress();
}

ncclResult_t SendComm::test(Request* req, int* done, int* sizes) {
  Req* r = static_cast<Req*>(req);
  *done = 0;
  if (ncclResult_t e = progress()) return e;
  // NCCL reuses its buffer as soon as we say done: every byte must be with the transport,
  // the header included.
  if (r->state != kPosted || !r->xfer.done() || conn_->ctrl_backlog() != 0) {
    log_if_stalled(r, [&] {
      static const char* const names[] = {"free", "in the codec engine", "waiting to be posted", "posted"};
      return "seq " + std::to_string(r->seq) + " sub " + std::to_string(r->sub) + ", " + std::to_string(r->size) +
             " bytes, " + names[r->state] + (r->kind == MemKind::kDevice ? " (device buffer)" : "") +
             ", engine job state " + std::to_string(r->job.state.load()) + ", transfer pieces left " +
             std::to_string(r->xfer.pending.load()) + ", control backlog " + std::to_string(conn_->ctrl_backlog()) +
             " bytes";
    });
    return ncclSuccess;
  }
  *done = 1;
  if (sizes) sizes[0] = int(r->size);
  staging_.give(std::move(r->stage));
  r->state = kFree;
  free_.push_back(r);
  return ncclSuccess;
}

}  // namespace zipccl
