#include "recv_comm.h"

#include "engine_params.h"
#include "log.h"
#include "zipccl/format.h"

namespace zipccl {

RecvComm::RecvComm(int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Link> link)
    : Comm(kRecv, dev, std::move(ctx), std::move(link)) {
  for (Req& r : reqs_) r.comm = this;
  for (FlushReq& f : flushes_) {
    f.comm = this;
    f.flush = true;
  }
}

RecvComm::~RecvComm() {
  for (Req& r : reqs_)
    if (r.in_use)
      for (uint32_t i = 0; i < r.n; ++i)
        if (r.subs[i].state == kDecoding) cancel_and_wait(&r.subs[i].job);
  link_.reset();  // joins the transport's threads, which may still write into posted buffers
  for (Req& r : reqs_)
    for (Sub& s : r.subs) end_lease(&s);
}

void RecvComm::end_lease(Sub* s) {
  if (!s->leased) return;
  s->leased = false;
  s->engine->unlease();
}

ncclResult_t RecvComm::irecv(int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                             bool flag_polled, void** request) {
  *request = nullptr;
  if (ncclResult_t e = progress()) return e;
  if (n < 1 || n > int(kMaxRecvs))
    return fail(ncclInvalidArgument, "irecv with " + std::to_string(n) + " grouped receives");
  Req& r = reqs_[next_seq_ % kMaxRequests];
  if (r.in_use) return ncclSuccess;  // kMaxRequests in flight already: NCCL retries
  const bool zip_on = zip_mode() == ZipMode::kAlways || (zip_mode() == ZipMode::kAuto && offers_.offer());
  const bool attr_flag_polled = ctx_->attr_flag_polled.load(std::memory_order_relaxed);
  // Compressed bytes may land only where NCCL waits for test() before reading (Simple), in
  // memory a codec engine can decode into.
  auto could_compress = [&](const Mr* mr, size_t capacity) {
    return zip_mode() != ZipMode::kOff && !flag_polled && !attr_flag_polled && mr && !mr->flag_polled &&
           engine_for(mr) && capacity > 0;
  };
  // The first receive that could take compressed bytes, from a sender that compresses, or a
  // quiet gate's probe: a cold kernel is worth a short wait.
  for (int i = 0; i < n && (offers_.expecting() || offers_.probing()); ++i) {
    const Mr* mr = static_cast<const Mr*>(mhandles ? mhandles[i] : nullptr);
    if (!zip_on || !could_compress(mr, sizes[i])) continue;
    if (wait_for_kernel(engine_for(mr))) return ncclSuccess;
    break;
  }
  ClearToSend cts;
  cts.seq = next_seq_;
  // Receives that never take compressed bytes, and those a quiet gate neither offers nor probes
  // with, let the sender push (over TCP, a clear-to-send less on its path), the latter only so far
  // that it sees the next probe. A pushed message the sender would have compressed opens a gate
  // quiet over small messages, and the receives after it send clear-to-sends again.
  const bool quiet_push = zip_mode() == ZipMode::kAuto && offers_.pushable();
  cts.pushable = true;
  cts.push_ahead = kPushAny;
  bool offered_any = false;
  cts.n = uint32_t(n);
  for (int i = 0; i < n; ++i) {
    const Mr* mr = static_cast<const Mr*>(mhandles ? mhandles[i] : nullptr);
    Sub& s = r.subs[i];
    s.state = kWaiting;
    s.data = static_cast<char*>(data[i]);
    s.capacity = sizes[i];
    s.compressed = false;
    s.orig_bytes = s.wire_bytes = 0;
    s.kind = mr ? mr->kind : MemKind::kHost;
    s.gpu_mapped = mr && mr->gpu_mapped;
    s.engine = engine_for(mr);
    const bool could = could_compress(mr, s.capacity);
    if (could && quiet_push)
      cts.push_ahead = offers_.push_ahead();
    else if (could)
      cts.pushable = false;
    bool compress_ok = zip_on && could;
    const bool device = s.kind == MemKind::kDevice;
    // In auto mode only where the decode will be fast: a resident GPU codec that is not running
    // now would leave it to the CPU, slower than the link. Forced compression takes the CPU,
    // except into device memory, which only the kernel reaches.
    if (compress_ok) {
      s.leased = s.engine->lease();
      compress_ok = s.leased || (zip_mode() == ZipMode::kAlways && !device);
      cold_ += !compress_ok;
    }
    Placement& p = cts.p[i];
    p.tag = tags[i];
    p.capacity = s.capacity;
    p.target = reinterpret_cast<uintptr_t>(s.data);
    receives_++;
    if (compress_ok) s.stage = staging(s.kind).take(zipccl::max_compressed_bytes(s.capacity));
    // Staging outside the GPU's arena (it is full) would leave the decode to the CPU; device
    // staging has none then.
    if (compress_ok && s.engine == resident_ && !s.stage.gpu_mapped && (zip_mode() == ZipMode::kAuto || device)) {
      staging(s.kind).give(std::move(s.stage));
      end_lease(&s);
      compress_ok = false;
    }
    if (compress_ok) {
      offered_++;
      offered_any = true;
      p.staging = reinterpret_cast<uintptr_t>(s.stage.p);
      p.staging_bytes = zipccl::max_compressed_bytes(s.capacity);
    }
    mark(Timeline::kPost, next_seq_, uint32_t(i), s.capacity, compress_ok ? Timeline::kCompressed : 0);
  }
  if (link_->post_cts(cts) != ncclSuccess) return check_link();
  probes_ += offered_any && offers_.probing();
  offers_.posted(offered_any);
  r.in_use = true;
  r.seq = next_seq_++;
  r.n = uint32_t(n);
  r.posted_ms = now_ms();
  r.stall_logged = false;
  *request = &r;
  return ncclSuccess;
}

// The link has checked that the message fits its placement.
ncclResult_t RecvComm::on_arrival(const MessageHeader& h) {
  Req& r = reqs_[h.seq % kMaxRequests];
  if (!r.in_use || r.seq != h.seq || h.sub >= r.n || r.subs[h.sub].state != kWaiting)
    return fail(ncclInternalError, "the link reported a message for no posted receive");
  Sub& s = r.subs[h.sub];
  s.compressed = h.compressed;
  s.wire_bytes = h.wire_bytes;
  s.orig_bytes = h.orig_bytes;
  stats_.messages++;
  stats_.bytes_wire += h.wire_bytes;
  stats_.compressed += h.compressed;
  mark(Timeline::kWire, h.seq, h.sub, h.wire_bytes, h.compressed ? Timeline::kCompressed : 0);
  // A pushed message went before its sender saw any offer: it arrived as if unoffered.
  if (h.pushed && s.stage.p) offers_.unseen();
  if (!h.pushed) offers_.followed();
  offers_.arrived(s.stage.p != nullptr && !h.pushed, h.compressed, h.why);
  if (!h.compressed) {  // raw, received in place
    stats_.bytes_in += h.wire_bytes;
    end_lease(&s);
    s.state = kDone;
    return ncclSuccess;
  }
  // The message must be exactly what arrived: bytes after its end would be accepted by the
  // decoder and mean a peer that does not speak this protocol. (Device staging is not the
  // host's to read: there the decoder's checks stand alone.)
  zipccl::Header head;
  if (h.wire_bytes >= sizeof head && s.kind != MemKind::kDevice) {
    std::memcpy(&head, s.stage.p, sizeof head);
    if (head.total_bytes != h.wire_bytes)
      return corrupt(h.seq, "its header says " + std::to_string(head.total_bytes) + " bytes, " +
                                std::to_string(h.wire_bytes) + " arrived");
  }
  if (s.kind == MemKind::kDevice && flush_staging_) {
    s.state = kLanded;
    ++landed_;
    return ncclSuccess;
  }
  submit_decode(&s);
  return ncclSuccess;
}

void RecvComm::submit_decode(Sub* sp) {
  Sub& s = *sp;
  CodecJob& j = s.job;
  j.state.store(CodecJob::kIdle, std::memory_order_relaxed);
  j.cancelled.store(false, std::memory_order_relaxed);
  j.op = CodecJob::kDecode;
  j.src = s.stage.p;
  j.src_bytes = s.wire_bytes;
  j.dst = s.data;
  j.gpu_ok = s.gpu_mapped && s.stage.gpu_mapped;
  j.gpu_only = s.kind == MemKind::kDevice;
  // The decoder must produce exactly the announced size, or at most what the receive takes.
  j.dst_cap = s.orig_bytes ? s.orig_bytes : s.capacity;
  s.state = kDecoding;
  s.engine->submit(&j);
}

ncclResult_t RecvComm::flush_staging() {
  if (landed_ > 0) {
    uint32_t f = 0;
    while (f < kStagingFlushes && (staging_flushes_[f].waiting > 0 || !staging_flushes_[f].xfer.done())) ++f;
    if (f < kStagingFlushes) {  // else the next progress() tries again
      const char* any = nullptr;
      for (Req& r : reqs_)
        for (uint32_t i = 0; r.in_use && i < r.n; ++i)
          if (r.subs[i].state == kLanded) {
            any = r.subs[i].stage.p;
            r.subs[i].state = kFlushing;
            r.subs[i].flush = f;
            ++staging_flushes_[f].waiting;
            ++flushing_;
          }
      landed_ = 0;
      if (link_->flush(any, &staging_flushes_[f].xfer) != ncclSuccess) return check_link();
    }
  }
  if (flushing_ == 0) return ncclSuccess;
  for (Req& r : reqs_)
    for (uint32_t i = 0; r.in_use && i < r.n; ++i) {
      Sub& s = r.subs[i];
      if (s.state != kFlushing || !staging_flushes_[s.flush].xfer.done()) continue;
      --staging_flushes_[s.flush].waiting;
      --flushing_;
      submit_decode(&s);
    }
  return ncclSuccess;
}

std::string RecvComm::details() const {
  std::string s = codec_rate(CodecJob::kDecode) + ", staging offered to " + std::to_string(offered_) + " of " +
                  std::to_string(receives_) + " receives";
  if (probes_ > 0) s += ", " + std::to_string(probes_) + " of them probes of a quiet gate";
  if (cold_ > 0) s += ", " + std::to_string(cold_) + " unoffered for a cold kernel";
  return s + kernel_waits();
}

ncclResult_t RecvComm::corrupt(uint32_t seq, const std::string& why) {
  return fail(ncclRemoteError, "corrupt compressed message (seq " + std::to_string(seq) + "): " + why);
}

ncclResult_t RecvComm::finish_job(Req* r, Sub* s) {
  stats_.codec_ns += uint64_t(s->job.seconds * 1e9);
  stats_.gpu_coded += s->job.on_gpu;
  if (s->job.status != zipccl::Status::kOk) return corrupt(r->seq, zipccl::status_string(s->job.status));
  if (s->orig_bytes && s->job.out_bytes != s->orig_bytes)
    return corrupt(r->seq, "it decodes to " + std::to_string(s->job.out_bytes) + " bytes, the header said " +
                               std::to_string(s->orig_bytes));
  s->orig_bytes = s->job.out_bytes;
  stats_.bytes_in += s->orig_bytes;
  mark_coded(s->job, r->seq, uint32_t(s - r->subs), s->orig_bytes, true);
  end_lease(s);
  s->state = kDone;
  return ncclSuccess;
}

ncclResult_t RecvComm::progress() {
  if (ncclResult_t e = check_link()) return e;
  if (link_->progress() != ncclSuccess) return check_link();
  for (;;) {
    MessageHeader h;
    bool got = false;
    if (link_->poll_arrival(&h, &got) != ncclSuccess) return check_link();
    if (!got) break;
    if (ncclResult_t e = on_arrival(h)) return e;
  }
  if (ncclResult_t e = flush_staging()) return e;
  poll_engines();
  for (Req& r : reqs_) {
    if (!r.in_use) continue;
    for (uint32_t i = 0; i < r.n; ++i)
      if (r.subs[i].state == kDecoding && r.subs[i].job.done())
        if (ncclResult_t e = finish_job(&r, &r.subs[i])) return e;
  }
  poll_engines();  // launches the jobs just submitted, as one batch
  return ncclSuccess;
}

ncclResult_t RecvComm::iflush(const void* data, void** request) {
  *request = nullptr;
  if (ncclResult_t e = progress()) return e;
  FlushReq* f = flushes_;
  while (f != flushes_ + kMaxRequests && f->in_use) ++f;
  if (f == flushes_ + kMaxRequests) return fail(ncclInternalError, "more flushes in flight than NCCL has requests");
  if (link_->flush(data, &f->xfer) != ncclSuccess) return check_link();
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
  bool waiting = false, all = true;
  for (uint32_t i = 0; i < r->n; ++i) {
    all &= r->subs[i].state == kDone;
    waiting |= r->subs[i].state == kWaiting;
  }
  if (!all) {
    log_if_stalled(r, [&] {
      static const char* const names[] = {"waiting for its header", "landed, its flush not yet posted",
                                          "landed, flushing", "in the codec engine", "done"};
      std::string s = "seq " + std::to_string(r->seq) + ":";
      for (uint32_t i = 0; i < r->n; ++i) {
        const Sub& u = r->subs[i];
        s += " [" + std::to_string(i) + "] " + names[u.state] + " (" + std::to_string(u.wire_bytes) + " of " +
             std::to_string(u.capacity) + " bytes" + (u.kind == MemKind::kDevice ? ", device" : "") +
             ", job state " + std::to_string(u.job.state.load()) + ")";
      }
      return s;
    });
    if (waiting && link_->peer_closed())
      return fail(ncclRemoteError, "sender closed the connection with a receive outstanding");
    return ncclSuccess;
  }
  *done = 1;
  for (uint32_t i = 0; i < r->n; ++i) {
    if (sizes) sizes[i] = int(r->subs[i].orig_bytes);
    mark(Timeline::kDone, r->seq, i, r->subs[i].orig_bytes);
    // Only now: a link may hold a registration of the whole receive's staging until then.
    staging(r->subs[i].kind).give(std::move(r->subs[i].stage));
  }
  r->in_use = false;
  return ncclSuccess;
}

}  // namespace zipccl
