#include "recv_comm.h"

#include <thread>

#include "log.h"
#include "engine_params.h"
#include "zipccl/format.h"

namespace zipccl {

RecvComm::RecvComm(int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Conn> conn)
    : Comm(kRecv, dev, std::move(ctx), std::move(conn)) {
  for (Req& r : reqs_) r.comm = this;
  for (FlushReq& f : flushes_) {
    f.comm = this;
    f.flush = true;
  }
}

RecvComm::~RecvComm() {
  for (Req& r : reqs_) {
    if (!r.in_use) continue;
    for (uint32_t i = 0; i < r.n; ++i) {
      if (r.subs[i].state != kDecoding) continue;
      r.subs[i].job.cancel();
      while (!r.subs[i].job.done()) {
        poll_engines();
        std::this_thread::yield();
      }
    }
  }
  conn_.reset();  // joins the transport's threads, which may still write into posted buffers
}

ncclResult_t RecvComm::irecv(int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                             bool flag_polled, void** request) {
  *request = nullptr;
  if (ncclResult_t e = progress()) return e;
  if (n < 1 || n > int(proto::kMaxRecvs))
    return fail(ncclInvalidArgument, "irecv with " + std::to_string(n) + " grouped receives");
  Req& r = reqs_[next_seq_ % proto::kMaxRequests];
  if (r.in_use) return ncclSuccess;  // 32 in flight already: NCCL retries
  const bool zip_on = zip_mode() != ZipMode::kOff;
  const bool attr_flag_polled = ctx_->attr_flag_polled.load(std::memory_order_relaxed);
  proto::Cts cts{};
  cts.type = proto::kCts;
  cts.seq = next_seq_;
  cts.n = uint32_t(n);
  for (int i = 0; i < n; ++i) {
    const Mr* mr = static_cast<const Mr*>(mhandles ? mhandles[i] : nullptr);
    Sub& s = r.subs[i];
    s.state = kWaitHeader;
    s.data = static_cast<char*>(data[i]);
    s.capacity = sizes[i];
    s.compressed = false;
    s.orig_bytes = s.wire_bytes = 0;
    // Compressed bytes may land only where NCCL waits for test() before reading (Simple), in
    // memory a codec engine can decode into.
    s.kind = mr ? mr->kind : MemKind::kHost;
    const bool staged = s.kind == MemKind::kDevice && !mr->direct;
    s.mirror = staged ? mr->mirror_of(s.data, s.capacity) : nullptr;
    if (staged && !s.mirror)
      return fail(ncclInvalidUsage, "irecv of " + std::to_string(s.capacity) + " bytes outside its registered buffer");
    s.engine = engine_for(mr);
    s.compress_ok = zip_on && !flag_polled && !attr_flag_polled && mr && !mr->flag_polled && s.engine &&
                    s.capacity > 0 && zipccl::max_compressed_bytes(s.capacity) <= s.engine->max_message_bytes();
    // A device buffer's compressed message must fit its mirror slot.
    s.staging_bytes = !s.compress_ok ? 0 : s.mirror ? s.capacity : zipccl::max_compressed_bytes(s.capacity);
    proto::CtsEntry& e = cts.e[i];
    e.tag = tags[i];
    e.flags = s.compress_ok ? uint32_t(proto::kCompressOk) : 0u;
    e.capacity = s.capacity;
    e.target_addr = reinterpret_cast<uintptr_t>(s.data);
    // The socket transport places bytes itself and allocates staging when a compressed message
    // is announced; an RDMA transport will advertise a registered staging slot here.
    e.staging_bytes = s.staging_bytes;
  }
  if (conn_->send_ctrl(&cts, sizeof cts) != ncclSuccess) return check_conn();
  r.in_use = true;
  r.seq = next_seq_++;
  r.n = uint32_t(n);
  awaiting_headers_ += uint32_t(n);
  r.posted_ms = now_ms();
  r.stall_logged = false;
  *request = &r;
  return ncclSuccess;
}

ncclResult_t RecvComm::on_header(const proto::DataHeader& h) {
  Req& r = reqs_[h.seq % proto::kMaxRequests];
  if (h.type != proto::kData || !r.in_use || r.seq != h.seq || h.sub >= r.n)
    return fail(ncclRemoteError, "protocol error: data header for no posted receive");
  Sub& s = r.subs[h.sub];
  const bool compressed = h.flags & proto::kCompressed;
  // A compressed message has at least its header and decodes to at least one byte (the sender
  // never compresses empty messages), so no engine is handed an empty job.
  if (s.state != kWaitHeader || h.orig_bytes > s.capacity ||
      (compressed && (!s.compress_ok || h.orig_bytes == 0 || h.wire_bytes < zipccl::kHeaderBytes)) ||
      (compressed ? h.wire_bytes > s.staging_bytes : h.wire_bytes != h.orig_bytes))
    return fail(ncclRemoteError, "protocol error: data header (seq " + std::to_string(h.seq) + ", " +
                                     std::to_string(h.orig_bytes) + " bytes) does not fit the receive");
  s.compressed = compressed;
  s.orig_bytes = h.orig_bytes;
  s.wire_bytes = h.wire_bytes;
  char* dst = s.data;
  // Any bytes for device memory land in its mirror (a socket cannot write device memory), host
  // buffers' compressed bytes in staging.
  if (s.mirror) {
    dst = s.mirror;
  } else if (compressed) {
    s.stage = staging_.take(h.wire_bytes);
    dst = s.stage.p.get();
  }
  if (conn_->post_recv(dst, h.wire_bytes, &s.xfer) != ncclSuccess) return check_conn();
  s.state = kReceiving;
  --awaiting_headers_;
  return ncclSuccess;
}

ncclResult_t RecvComm::advance(Req* r) {
  for (uint32_t i = 0; i < r->n; ++i) {
    Sub& s = r->subs[i];
    if (s.state == kReceiving && s.xfer.done()) {
      stats_.messages++;
      stats_.bytes_in += s.orig_bytes;
      stats_.bytes_wire += s.wire_bytes;
      const char* staged = s.mirror ? s.mirror : s.stage.p.get();
      if (!staged || s.wire_bytes == 0) {  // raw, received in place (or nothing to copy)
        s.state = kDone;
        continue;
      }
      stats_.compressed += s.compressed;
      CodecJob& j = s.job;
      j.state.store(CodecJob::kIdle, std::memory_order_relaxed);
      j.cancelled.store(false, std::memory_order_relaxed);
      j.op = s.compressed ? CodecJob::kDecode : CodecJob::kCopy;
      j.src = staged;
      j.src_bytes = s.wire_bytes;
      j.dst = s.data;
      j.dst_cap = s.orig_bytes;  // the decoder must produce exactly this many bytes
      s.state = kDecoding;
      s.engine->submit(&j);
    }
    if (s.state == kDecoding && s.job.done()) {
      staging_.give(std::move(s.stage));
      if (s.job.failed) return fail(ncclInternalError, "the GPU codec engine failed (see its warning)");
      if (s.compressed) {
        stats_.codec_ns += uint64_t(s.job.seconds * 1e9);
        if (s.job.status != zipccl::Status::kOk || s.job.out_bytes != s.orig_bytes)
          return fail(ncclRemoteError, std::string("corrupt compressed message (seq ") + std::to_string(r->seq) +
                                           "): " + zipccl::status_string(s.job.status));
      }
      s.state = kDone;
    }
  }
  return ncclSuccess;
}

ncclResult_t RecvComm::progress() {
  if (ncclResult_t e = check_conn()) return e;
  if (conn_->progress() != ncclSuccess) return check_conn();
  while (awaiting_headers_ > 0) {
    proto::DataHeader h;
    size_t len = 0;
    if (conn_->recv_ctrl(&h, sizeof h, &len) != ncclSuccess) return check_conn();
    if (len == 0) break;
    if (len != sizeof h) return fail(ncclRemoteError, "protocol error: bad control record size");
    if (ncclResult_t e = on_header(h)) return e;
  }
  poll_engines();
  for (Req& r : reqs_)
    if (r.in_use)
      if (ncclResult_t e = advance(&r)) return e;
  poll_engines();  // launches the jobs just submitted, as one batch
  return ncclSuccess;
}

ncclResult_t RecvComm::iflush(const void* data, void** request) {
  *request = nullptr;
  if (ncclResult_t e = progress()) return e;
  FlushReq* f = flushes_;
  while (f != flushes_ + proto::kMaxRequests && f->in_use) ++f;
  if (f == flushes_ + proto::kMaxRequests) return fail(ncclInternalError, "more flushes in flight than NCCL has requests");
  if (conn_->flush(data, &f->xfer) != ncclSuccess) return check_conn();
  f->in_use = true;
  f->posted_ms = now_ms();
  f->stall_logged = false;
  *request = f;
  return ncclSuccess;
}

ncclResult_t RecvComm::test(Request* req, int* done, int* sizes) {
  *done = 0;
  if (ncclResult_t e = progress()) return e;
  if (req->flush) {
    auto* f = static_cast<FlushReq*>(req);
    if (!f->xfer.done()) {
      log_if_stalled(f, [] { return std::string("GPUDirect flush not completed"); });
      return ncclSuccess;
    }
    *done = 1;
    if (sizes) sizes[0] = 0;
    f->in_use = false;
    return ncclSuccess;
  }
  Req* r = static_cast<Req*>(req);
  bool waiting_header = false, all = true;
  for (uint32_t i = 0; i < r->n; ++i) {
    all &= r->subs[i].state == kDone;
    waiting_header |= r->subs[i].state == kWaitHeader;
  }
  if (!all) {
    log_if_stalled(r, [&] {
      static const char* const names[] = {"waiting for its header", "receiving", "in the codec engine", "done"};
      std::string s = "seq " + std::to_string(r->seq) + ":";
      for (uint32_t i = 0; i < r->n; ++i) {
        const Sub& u = r->subs[i];
        s += " [" + std::to_string(i) + "] " + names[u.state] + " (" + std::to_string(u.wire_bytes) + " of " +
             std::to_string(u.capacity) + " bytes" + (u.kind == MemKind::kDevice ? ", device" : "") +
             ", pieces left " + std::to_string(u.xfer.pending.load()) + ", job state " +
             std::to_string(u.job.state.load()) + ")";
      }
      return s;
    });
    if (waiting_header && conn_->peer_closed())
      return fail(ncclRemoteError, "sender closed the connection with a receive outstanding");
    return ncclSuccess;
  }
  *done = 1;
  for (uint32_t i = 0; i < r->n; ++i)
    if (sizes) sizes[i] = int(r->subs[i].orig_bytes);
  r->in_use = false;
  return ncclSuccess;
}

}  // namespace zipccl
