#include "send_comm.h"

#include <algorithm>

#include "engine_params.h"
#include "log.h"

namespace zipccl {

SendComm::SendComm(int dev, std::shared_ptr<NetCtx> ctx, std::unique_ptr<Link> link, double link_bytes_per_s)
    : Comm(kSend, dev, std::move(ctx), std::move(link)),
      meter_(link_meter(dev)),
      backlog_(link_backlog(dev)),
      policy_(zip_mode(), link_bytes_per_s, planning_meter(dev), backlog_),
      reqs_(new Req[kPool]) {
  for (size_t i = 0; i < kPool; ++i) {
    reqs_[i].comm = this;
    free_.push_back(&reqs_[kPool - 1 - i]);
  }
}

SendComm::~SendComm() {
  // Nothing may still read NCCL's buffers or our staging once we return.
  for (size_t i = 0; i < kPool; ++i)
    if (reqs_[i].state == kCoding) cancel_and_wait(&reqs_[i].job);
  for (size_t i = 0; i < kPool; ++i) {
    end_lease(&reqs_[i]);
    count_backlog(&reqs_[i], 0);
  }
  link_.reset();  // joins the transport's threads, which may still hold posted payloads
}

void SendComm::end_lease(Req* r) {
  if (!r->leased) return;
  r->leased->unlease();
  r->leased = nullptr;
}

// Clear-to-sends matter only when an isend looks for one; no more than the receiver may post.
ncclResult_t SendComm::take_cts() {
  while (pending_.size() < kMaxRequests) {
    Pending p;
    bool got = false;
    if (link_->poll_cts(&p.cts, &got) != ncclSuccess) return check_link();
    if (!got) return ncclSuccess;
    if (p.cts.n == 0) {  // no clear-to-sends from here on: every message goes at once (to a bound)
      pushing_ = true;
      push_bounded_ = p.cts.push_bounded;
      push_until_ = p.cts.push_until;
      continue;
    }
    pushing_ = false;
    mark(Timeline::kCts, p.cts.seq, 0, p.cts.n);
    pending_.push_back(p);
    if (ncclResult_t e = match_eager(&pending_.back())) return e;
  }
  return ncclSuccess;
}

ncclResult_t SendComm::match_eager(Pending* p) {
  const uint32_t first = p->cts.first;
  // Pushed into receives that had no clear-to-send: placed by the receiver alone.
  while (!eager_.empty() && int32_t(eager_.front().index - first) < 0) eager_.pop_front();
  // Sent ahead only while every clear-to-send taken was matched: this one is pending_[matching_].
  while (!eager_.empty() && eager_.front().index - first < p->cts.n) {
    const Eager a = eager_.front();
    const uint32_t sub = placement_for_tag(p->cts, p->matched, a.tag);
    if (sub == p->cts.n || a.size > p->cts.p[sub].capacity)
      return fail(ncclInvalidUsage, "collective mismatch: isend of " + std::to_string(a.size) + " bytes (tag " +
                                        std::to_string(a.tag) + ") sent ahead of its receive fits no receive of " +
                                        "clear-to-send seq " + std::to_string(p->cts.seq) + " (tags" +
                                        placement_tags(p->cts) + ")");
    fill(p, sub);  // with no request: the message is with the link already
    eager_.pop_front();
  }
  // All its placements pushed, some beyond what eager_ keeps: filled, in whatever order.
  if (int32_t(next_index_ - (first + p->cts.n)) >= 0 && p->matched != (1u << p->cts.n) - 1)
    for (uint32_t sub = 0; sub < p->cts.n; ++sub)
      if (!(p->matched >> sub & 1)) fill(p, sub);
  return ncclSuccess;
}

void SendComm::fill(Pending* p, uint32_t sub) {
  p->matched |= 1u << sub;
  if (p->matched == (1u << p->cts.n) - 1) ++matching_;
}

ncclResult_t SendComm::finish_job(Req* r) {
  const CodecJob& j = r->job;
  r->state = kReady;
  end_lease(r);
  if (j.skipped) {  // no GPU at hand: raw, and nothing learnt about the data
    policy_.unmeasured();
    r->h.compressed = false;
    r->h.why = RawWhy::kWanted;
    r->wire = r->data;
    staging(r->kind).give(std::move(r->stage));
    return ncclSuccess;
  }
  stats_.codec_ns += uint64_t(j.seconds * 1e9);
  stats_.gpu_coded += j.on_gpu;
  // Pays only if coded (not the codec's raw fallback), below NCCL_ZIP_MAX_RATIO and within the
  // receiver's staging.
  const bool pays = j.status == zipccl::Status::kOk && j.codec != zipccl::Codec::Raw &&
                    double(j.out_bytes) <= max_ratio() * double(r->size) && j.out_bytes <= r->staging_cap;
  r->h.compressed = pays;
  r->h.why = pays ? RawWhy::kUnsaid : RawWhy::kDeclined;
  r->h.wire_bytes = pays ? j.out_bytes : r->size;
  count_backlog(r, int64_t(r->h.wire_bytes));
  if (pays) {
    r->wire = r->stage.p;
  } else {
    r->wire = r->data;
    staging(r->kind).give(std::move(r->stage));
  }
  policy_.record(r->size, r->h.wire_bytes);
  mark_coded(j, r->h.seq, r->h.sub, r->h.wire_bytes, pays);
  ZIP_TRACE("send seq %u sub %u: %zu bytes as %s -> %llu on the wire (%.3f ms in %s codec)", r->h.seq, r->h.sub,
            r->size, r->h.compressed ? zipccl::codec_name(j.codec) : "raw", (unsigned long long)r->h.wire_bytes,
            j.seconds * 1e3, j.on_gpu ? "GPU" : "CPU");
  return ncclSuccess;
}

// Hands the link every message whose turn it is, in (seq, sub) order.
ncclResult_t SendComm::progress() {
  if (ncclResult_t e = check_link()) return e;
  if (link_->progress() != ncclSuccess) return check_link();
  poll_engines();
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    while (posted_subs_ < p.cts.n) {
      Req* r = p.req[posted_subs_];
      if (!r && (p.matched >> posted_subs_ & 1)) {  // went ahead of the clear-to-send
        ++posted_subs_;
        continue;
      }
      if (!r) return ncclSuccess;  // its isend has not come yet
      if (r->state == kCoding) {
        if (!r->job.done()) return ncclSuccess;
        if (ncclResult_t e = finish_job(r)) return e;
      }
      r->xfer.start_ns.store(0, std::memory_order_relaxed);
      if (link_->post_message(r->h, p.cts.p[posted_subs_], r->wire, &r->xfer) != ncclSuccess) return check_link();
      went_to_link(r);
      ++posted_subs_;
    }
    pending_.pop_front();
    posted_subs_ = 0;
    --matching_;
  }
  return ncclSuccess;
}

// isend returns no request (NCCL retries): log it if that goes on for NCCL_ZIP_STALL_WARN_S.
ncclResult_t SendComm::defer(size_t size, int tag) {
  if (deferred_.posted_ms == 0) {
    deferred_.posted_ms = now_ms();
    deferred_.stall_logged = false;
    mark(Timeline::kDefer, 0, 0, size);
  }
  log_if_stalled(&deferred_, [&] {
    std::string s = "isend of " + std::to_string(size) + " bytes, tag " + std::to_string(tag) + " deferred: ";
    if (matching_ == pending_.size()) return s + "no clear-to-send from the receiver";
    const Pending& p = pending_[matching_];
    s += "clear-to-send seq " + std::to_string(p.cts.seq) + " has tags";
    for (uint32_t i = 0; i < p.cts.n; ++i)
      s += " " + std::to_string(p.cts.p[i].tag) + ((p.matched >> i & 1) ? "(matched)" : "");
    return s + ", " + std::to_string(free_.size()) + " free requests";
  });
  return ncclSuccess;
}

ncclResult_t SendComm::isend(void* data, size_t size, int tag, Mr* mr, void** request) {
  *request = nullptr;
  if (ncclResult_t e = progress()) return e;
  if (ncclResult_t e = take_cts()) return e;
  // This message's placement is number next_index_: in the clear-to-send being matched, or in
  // one still to come, or in a receive that had none (the receiver said push, and a later
  // receive's clear-to-send came already).
  const bool later_cts = matching_ < pending_.size() && int32_t(pending_[matching_].cts.first - next_index_) > 0;
  if (matching_ == pending_.size() || later_cts) {
    if (link_->peer_closed()) return fail(ncclRemoteError, "receiver closed the connection");
    bool sent = false;
    // Past a bounded push the next receive may be a probe whose offer this message must see.
    const bool push = (pushing_ && (!push_bounded_ || int32_t(next_index_ - push_until_) < 0)) || later_cts;
    if (ncclResult_t e = send_eager(data, size, tag, mr, push, request, &sent)) return e;
    if (sent) return progress();
    return defer(size, tag);  // the receiver has not posted this receive yet: NCCL retries
  }
  Pending& p = pending_[matching_];
  const uint32_t sub = placement_for_tag(p.cts, p.matched, tag);
  if (sub == p.cts.n || free_.empty()) return defer(size, tag);
  deferred_.posted_ms = 0;
  const Placement& to = p.cts.p[sub];
  // As NCCL's IB transport: the two ends disagree on the collective, a usage error.
  if (size > to.capacity)
    return fail(ncclInvalidUsage, "collective mismatch: isend of " + std::to_string(size) + " bytes (tag " +
                                      std::to_string(tag) + ") into a receive of " + std::to_string(to.capacity) +
                                      " bytes posted by the peer");
  CodecEngine* engine = engine_for(mr);
  const double ahead = engine ? double(bytes_ahead()) : 0;
  // The receiver takes compressed bytes (its kernel runs) and this message would be compressed:
  // a cold kernel here is worth a short wait.
  if (to.staging_bytes > 0 && engine && policy_.would_compress(size, *engine, ahead) && wait_for_kernel(engine))
    return defer(size, tag);
  // Why it goes raw, if it does, as the receiver is told (RawWhy): no codec for this memory, or
  // the policy's word.
  RawWhy why = RawWhy::kDeclined;
  bool compress = false;
  if (engine && to.staging_bytes > 0) {
    compress = policy_.should_compress(size, *engine, ahead, &why);
  } else if (engine && policy_.unoffered(size, *engine, ahead, &why) && zip_mode() == ZipMode::kAuto) {
    ++unoffered_;
  }
  // A lease keeps the resident GPU codec's kernel running until the encode is done, so a stream
  // of messages keeps it up. Without one, auto mode sends raw at once (and may try again with
  // the next message: the lease asked the kernel to start); forced compression takes the CPU,
  // except from device memory, which only the kernel reaches.
  const bool device = mr && mr->kind == MemKind::kDevice;
  const bool wanted = compress;
  bool leased = compress && engine->lease();
  if (compress && !leased && (zip_mode() != ZipMode::kAlways || device)) compress = false;
  StagingPool::Buf stage;
  if (compress) stage = staging(device ? MemKind::kDevice : MemKind::kHost).take(zipccl::max_compressed_bytes(size));
  if (compress && !stage.p) {  // device staging whose arena is full
    engine->unlease();
    leased = compress = false;
    ++unstaged_;
  } else if (wanted && !compress) {
    ++cold_;
  }
  if (wanted && !compress) {
    policy_.unmeasured();
    why = RawWhy::kWanted;
  }
  Req* r = take_req(data, size, mr ? mr->kind : MemKind::kHost, p.cts.seq, sub, compress ? RawWhy::kUnsaid : why);
  r->staging_cap = to.staging_bytes;
  r->leased = leased ? engine : nullptr;
  mark(Timeline::kPost, r->h.seq, sub, size, compress ? Timeline::kCompressed : 0);  // before its encode starts
  if (compress) {
    r->stage = std::move(stage);
    CodecJob& j = r->job;
    j.state.store(CodecJob::kIdle, std::memory_order_relaxed);
    j.cancelled.store(false, std::memory_order_relaxed);
    j.op = CodecJob::kEncode;
    j.src = data;
    j.src_bytes = size;
    j.dst = r->stage.p;
    j.dst_cap = r->stage.cap;
    j.checksum = checksum() != 0;
    j.max_ratio = max_ratio();
    j.gpu_ok = mr->gpu_mapped && r->stage.gpu_mapped;
    j.gpu_only = device;
    r->state = kCoding;
    engine->submit(&j);
  } else {
    r->state = kReady;
  }
  count_backlog(r, compress ? int64_t(double(size) * policy_.ratio()) : int64_t(size));
  p.req[sub] = r;
  fill(&p, sub);
  ++next_index_;
  *request = r;
  return progress();
}

ncclResult_t SendComm::send_eager(void* data, size_t size, int tag, Mr* mr, bool push, void** request, bool* sent) {
  *sent = false;
  // After every earlier message (the receiver places them in order), host memory (the link
  // copies it); pushed, or raw by the policy whatever the receive offers and within the link's
  // bounds.
  CodecEngine* engine = engine_for(mr);
  if (matching_ != 0 || free_.empty() || (mr && mr->kind == MemKind::kDevice)) return ncclSuccess;
  if (!push && (size > link_->eager_bytes() || eager_.size() >= link_->eager_ahead() ||
                (engine && !policy_.raw_by_size(size))))
    return ncclSuccess;
  RawWhy why = RawWhy::kDeclined;
  if (push) {  // as a receive that offered no staging
    if (engine && policy_.unoffered(size, *engine, double(bytes_ahead()), &why) && zip_mode() == ZipMode::kAuto)
      ++unoffered_;
  } else if (engine) {
    policy_.should_compress(size, *engine, 0, &why);  // a no, counted as such
  }
  const uint32_t index = next_index_;
  Req* r = take_req(data, size, MemKind::kHost, index, kMaxRecvs, why);
  r->eager = true;
  count_backlog(r, int64_t(size));
  r->xfer.start_ns.store(0, std::memory_order_relaxed);
  mark(Timeline::kPost, index, kMaxRecvs, size);
  if (link_->post_eager(index, tag, data, size, why, push, &r->xfer) != ncclSuccess) return check_link();
  ++next_index_;
  eager_.push_back({index, tag, size});
  if (push && eager_.size() > kMaxRecvs) eager_.pop_front();
  deferred_.posted_ms = 0;
  went_to_link(r);
  ++(push ? pushed_ : sent_eager_);
  *request = r;
  *sent = true;
  return ncclSuccess;
}

void SendComm::count_backlog(Req* r, int64_t wire_bytes) {
  backlog_->add(wire_bytes - r->backlog);
  r->backlog = wire_bytes;
}

void SendComm::went_to_link(Req* r) {
  r->wire_ns = now_ns();
  mark(Timeline::kWire, r->h.seq, r->h.sub, r->h.wire_bytes, r->h.compressed ? Timeline::kCompressed : 0);
  stats_.messages++;
  stats_.compressed += r->h.compressed;
  stats_.bytes_in += r->size;
  stats_.bytes_wire += r->h.wire_bytes;
  r->state = kPosted;
}

SendComm::Req* SendComm::take_req(const void* data, size_t size, MemKind kind, uint32_t seq, uint32_t sub,
                                  RawWhy why) {
  Req* r = free_.back();
  free_.pop_back();
  r->data = static_cast<const char*>(data);
  r->size = size;
  r->kind = kind;
  r->h = MessageHeader{};
  r->h.seq = seq;
  r->h.sub = sub;
  r->h.wire_bytes = r->h.orig_bytes = size;
  r->h.why = why;
  r->wire = r->data;
  r->staging_cap = 0;
  r->leased = nullptr;
  r->eager = false;
  r->backlog = 0;
  r->posted_ms = now_ms();
  r->stall_logged = false;
  return r;
}

uint64_t SendComm::bytes_ahead() const {
  // Requests come from the back of free_, which starts at reqs_[0]: the ones in use lie at the
  // low indices, and the scan (on every isend) ends once it has seen them all.
  uint64_t n = 0;
  for (size_t i = 0, live = kPool - free_.size(); live > 0 && i < kPool; ++i) {
    const Req& r = reqs_[i];
    if (r.state == kFree) continue;
    --live;
    if (!(r.state == kPosted && r.xfer.done())) n += r.h.wire_bytes;
  }
  return n;
}

ncclResult_t SendComm::test(Request* req, int* done, int* sizes) {
  Req* r = static_cast<Req*>(req);
  *done = 0;
  if (ncclResult_t e = progress()) return e;
  // NCCL reuses its buffer as soon as we say done: every byte must be the network's.
  if (r->state != kPosted || !r->xfer.done()) {
    log_if_stalled(r, [&] {
      static const char* const names[] = {"free", "in the codec engine", "waiting for its turn", "posted"};
      if (r->eager)
        return "message " + std::to_string(r->h.seq) + ", " + std::to_string(r->size) +
               " bytes, sent ahead of its clear-to-send, transfer pieces left " + std::to_string(r->xfer.pending.load());
      return "seq " + std::to_string(r->h.seq) + " sub " + std::to_string(r->h.sub) + ", " + std::to_string(r->size) +
             " bytes, " + names[r->state] + (r->kind == MemKind::kDevice ? " (device buffer)" : "") +
             ", engine job state " + std::to_string(r->job.state.load()) + ", transfer pieces left " +
             std::to_string(r->xfer.pending.load());
    });
    return ncclSuccess;
  }
  *done = 1;
  if (sizes) sizes[0] = int(r->size);
  mark(Timeline::kDone, r->h.seq, r->h.sub, r->size);
  // The link's rate from messages of a size that fills it (a small one is mostly latency), each
  // from when the transport took it up: a compressed message reaches an idle link after its
  // encode, and the wake-up of the transport's thread is not the link's time (on loopback,
  // counted from the post, compressed traffic read half the raw rate, which made the codec look
  // worth its cost).
  if (int64_t(r->size) >= min_bytes()) {
    const int64_t taken = r->xfer.start_ns.load(std::memory_order_relaxed);
    meter_->add(std::max(r->wire_ns, taken), r->xfer.end_ns.load(std::memory_order_relaxed), r->h.wire_bytes);
  }
  count_backlog(r, 0);
  staging(r->kind).give(std::move(r->stage));
  r->state = kFree;
  free_.push_back(r);
  return ncclSuccess;
}

std::string SendComm::details() const {
  std::string s = codec_rate(CodecJob::kEncode);
  if (const double bps = meter_->bytes_per_s(); bps > 0) {
    char buf[96];
    snprintf(buf, sizeof buf, ", link %.2f GB/s (peak %.2f)", bps / 1e9, meter_->peak_bytes_per_s() / 1e9);
    s += buf;
  }
  if (const std::string d = policy_.declines(); !d.empty()) s += ", " + d;
  if (cold_ > 0) s += ", " + std::to_string(cold_) + " raw for a cold kernel";
  if (unstaged_ > 0) s += ", " + std::to_string(unstaged_) + " raw for want of device staging";
  if (unoffered_ > 0) s += ", " + std::to_string(unoffered_) + " raw unoffered that it would have compressed";
  if (sent_eager_ > 0) s += ", " + std::to_string(sent_eager_) + " sent ahead of their clear-to-send";
  if (pushed_ > 0) s += ", " + std::to_string(pushed_) + " pushed (the receives offered nothing)";
  return s + kernel_waits();
}

}  // namespace zipccl
