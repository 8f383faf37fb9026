#include "socket_link.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "line_copy.h"
#include "log.h"
#include "socket_params.h"
#include "socket_wire.h"
#include "sockets.h"
#include "tcp_bootstrap.h"

namespace zipccl::tcp {
namespace {

// A message gets a chunk per kChunkSpan bytes begun, at most one per data socket. Each chunk costs
// a helper thread's wake-up at each end, so below ~128 KiB a second chunk costs more than the
// parallel copy gains (docs/benchmarks.md, Small messages).
constexpr size_t kChunkSpan = 128 << 10;
// Control bytes read ahead, in one recv(). Bounded, so a peer that floods the control socket fills
// its own socket buffers, not this process's memory; an inline message's bytes past them are
// received straight into their buffer, not copied (a copy of what one read brings costs less than
// another recv()).
constexpr size_t kReadAhead = 16 << 10;
// Sent records are dropped from the send queue's buffer once it holds this many bytes (it empties
// whenever everything is sent, which a saturated link may not let happen for a long time).
constexpr size_t kOutCompactAt = 64 << 10;
// How long a closing link waits for a peer that takes none of its last bytes (stall_ms if shorter):
// an abort closes every connection, one after another.
constexpr int64_t kCloseQuietMs = 2000;

}  // namespace

SocketLink::SocketLink(std::vector<int> fds, std::string peer, std::shared_ptr<Pacer> pacer, int64_t stall_ms,
                       InlineRule inline_rule, uint32_t eager_ahead, bool push)
    : peer_(std::move(peer)),
      stall_ms_(stall_ms),
      pacer_(std::move(pacer)),
      inline_(inline_rule),
      eager_ahead_(eager_ahead),
      push_(push) {
  ctrl_fd_ = fds[0];
  data_fds_.assign(fds.begin() + 1, fds.end());
  const int nthreads = std::min<int>(socket_threads(), int(data_fds_.size()));
  std::vector<std::vector<int>> per(static_cast<size_t>(nthreads));
  for (size_t i = 0; i < data_fds_.size(); ++i) per[i % size_t(nthreads)].push_back(data_fds_[i]);
  for (int t = 0; t < nthreads; ++t)
    workers_.push_back(std::make_unique<SocketWorker>(per[size_t(t)], &err_, peer_, pacer_.get(), &received_));
}

SocketLink::~SocketLink() {
  workers_.clear();  // joins the helper threads before their sockets go away
  // Requests complete once the kernel has their bytes; the peer may not have them yet, and the
  // control socket (the one both ends write) would reset on close and drop them. Data sockets
  // carry one direction only: closed, they still deliver.
  const int64_t quiet = stall_ms_ > 0 ? std::min(stall_ms_, kCloseQuietMs) : kCloseQuietMs;
  if (const size_t left = close_delivered(ctrl_fd_, quiet))
    ZIP_WARN("link to %s closed with %zu bytes its peer did not take in %lld ms", peer_.c_str(), left,
             (long long)quiet);
  for (int fd : data_fds_) close(fd);
}

ncclResult_t SocketLink::fail(ncclResult_t code, const std::string& why) {
  err_.set(code, why);
  return err_.code();
}

// ---- control records ----------------------------------------------------------------------------

void SocketLink::queue_record(const void* rec, uint32_t len, Xfer* x, const void* more, uint32_t more_len) {
  const char* p = static_cast<const char*>(rec);
  const uint32_t total = len + more_len;
  const size_t own_off = out_.size();
  out_.insert(out_.end(), reinterpret_cast<const char*>(&total), reinterpret_cast<const char*>(&total) + 4);
  out_.insert(out_.end(), p, p + len);
  if (!out_spans_.empty() && !out_spans_.back().ext)
    out_spans_.back().len += 4 + len;
  else
    out_spans_.push_back({nullptr, own_off, 4 + size_t(len)});
  if (more_len) out_spans_.push_back({static_cast<const char*>(more), 0, more_len});
  out_queued_ += 4 + total;
  if (x) {
    x->pending.fetch_add(1, std::memory_order_relaxed);
    record_ends_.emplace_back(out_queued_, x);
  }
}

ncclResult_t SocketLink::send_records() {
  constexpr size_t kIov = 64;
  while (!out_spans_.empty()) {
    iovec iov[kIov];
    size_t niov = 0, n = 0;
    for (auto it = out_spans_.begin(); it != out_spans_.end() && niov < kIov; ++it, ++niov) {
      const size_t skip = niov == 0 ? out_head_off_ : 0;
      const char* base = it->ext ? it->ext : out_.data() + it->own_off;
      iov[niov] = {const_cast<char*>(base + skip), it->len - skip};
      n += it->len - skip;
    }
    int64_t paced_ns = 0;
    if (pacer_) {
      if ((n = pacer_->take(n, &paced_ns)) == 0) break;  // the next progress() tries again
      size_t left = n;  // the iovec cut at what the pacer gave
      for (size_t i = 0; i < niov; ++i) {
        if (iov[i].iov_len >= left) {
          iov[i].iov_len = left;
          niov = i + 1;
          break;
        }
        left -= iov[i].iov_len;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = niov;
    const ssize_t r = ::sendmsg(ctrl_fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (pacer_ && size_t(r > 0 ? r : 0) < n) pacer_->give_back(n - size_t(r > 0 ? r : 0));
    if (r > 0) {
      out_sent_ += uint64_t(r);
      for (size_t done = size_t(r); done > 0;) {
        const size_t rest = out_spans_.front().len - out_head_off_;
        if (done < rest) {
          out_head_off_ += done;
          break;
        }
        done -= rest;
        out_spans_.pop_front();
        out_head_off_ = 0;
      }
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    // A sender that pushed its last message may close before this end posts the receives for it
    // (its bytes are here still): records that carry no message of ours have no one to read them.
    if (r < 0 && (errno == ECONNRESET || errno == EPIPE) && record_ends_.empty()) {
      out_spans_.clear();
      out_head_off_ = 0;
      out_reset_ = true;
      break;
    }
    return fail(ncclRemoteError, "control send to " + peer_ + ": " + std::strerror(errno));
  }
  drop_sent_records();
  while (!record_ends_.empty() && record_ends_.front().first <= out_sent_) {
    record_ends_.front().second->piece_done();
    record_ends_.pop_front();
  }
  return ncclSuccess;
}

void SocketLink::drop_sent_records() {
  if (out_spans_.empty()) {
    out_.clear();
    return;
  }
  if (out_.size() < kOutCompactAt) return;
  size_t sent = out_.size();  // records before the first one still queued
  for (const OutSpan& s : out_spans_) {
    if (!s.ext) {
      sent = s.own_off;
      break;
    }
  }
  if (sent < out_.size() / 2) return;  // moves at most as many bytes as it drops
  out_.erase(out_.begin(), out_.begin() + long(sent));
  for (OutSpan& s : out_spans_)
    if (!s.ext) s.own_off -= sent;
}

void SocketLink::read_socket(size_t need) {
  if (in_off_ == in_end_) in_off_ = in_end_ = 0;
  if (in_off_ > 0 && (in_end_ == in_.size() || in_.size() - in_off_ < need)) {  // taken records go
    std::memmove(in_.data(), in_.data() + in_off_, in_end_ - in_off_);
    in_end_ -= in_off_;
    in_off_ = 0;
  }
  if (in_.size() < need) in_.resize(kReadAhead);
  while (!peer_closed_ && in_end_ < in_.size()) {
    const ssize_t r = ::recv(ctrl_fd_, in_.data() + in_end_, in_.size() - in_end_, MSG_DONTWAIT);
    if (r > 0) {
      in_end_ += size_t(r);
      in_progress_ms_ = now_ms();
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    // The peer closed (or reset) its end. Not an error by itself: data already on the data
    // sockets still arrives; the engine fails whatever still waits on this peer.
    peer_closed_ = true;
  }
}

ncclResult_t SocketLink::next_record(size_t cap, size_t head, const char** rec, size_t* len, size_t* have) {
  *len = *have = 0;
  auto whole = [&](uint32_t* l) {
    if (in_end_ - in_off_ < 4) return false;
    std::memcpy(l, in_.data() + in_off_, 4);
    return in_end_ - in_off_ >= 4 + std::min(size_t(*l), head);
  };
  // Part of a record and no more bytes: the peer closed its end in its middle (its process died;
  // everything it sent has been read), or stopped there for stall_ms_.
  auto stalled = [&] { return peer_closed_ || (stall_ms_ > 0 && now_ms() - in_progress_ms_ > stall_ms_); };
  auto stopped = [&](const std::string& what) {
    if (peer_closed_)
      return fail(ncclRemoteError,
                  "peer " + peer_ + " closed the connection in the middle of a control record (" + what + ")");
    return fail(ncclRemoteError, "peer " + peer_ + " stopped in the middle of a control record (" + what + ") for " +
                                     std::to_string(stall_ms_) + " ms (NCCL_ZIP_SOCKET_TIMEOUT_MS)");
  };
  // Every record has a type: an empty one is garbage, and a stream of them would keep the
  // receiver busy without end. Checked before the length sizes a read, and after a read brings it.
  auto bad = [&](uint32_t l) { return l == 0 || l > kMaxRecord || l > cap; };
  auto refuse = [&](uint32_t l) {
    return fail(ncclRemoteError, "protocol error: control record of " + std::to_string(l) + " bytes from " + peer_);
  };
  uint32_t l = 0;
  if (!whole(&l)) {
    const bool sized = in_end_ - in_off_ >= 4;
    if (sized && bad(l)) return refuse(l);
    read_socket(sized ? 4 + std::min(size_t(l), head) : 4);
  }
  if (in_end_ - in_off_ < 4) {
    if (in_end_ > in_off_ && stalled()) return stopped(std::to_string(in_end_ - in_off_) + " bytes of its length");
    return ncclSuccess;
  }
  std::memcpy(&l, in_.data() + in_off_, 4);
  if (bad(l)) return refuse(l);
  if (!whole(&l)) {
    if (stalled()) return stopped(std::to_string(in_end_ - in_off_ - 4) + " of " + std::to_string(l) + " bytes");
    return ncclSuccess;
  }
  *rec = in_.data() + in_off_ + 4;
  *len = l;
  *have = std::min(size_t(l), in_end_ - in_off_ - 4);
  in_off_ += 4 + *have;
  return ncclSuccess;
}

// Gone, and everything it sent has been taken: no record buffered, no message on its way.
bool SocketLink::peer_closed() const { return peer_closed_ && in_end_ - in_off_ < 4 && landing_.empty(); }

// ---- data sockets -------------------------------------------------------------------------------

// Both ends split a message the same way (it depends only on n and on how many messages came
// before), so chunk i of the sender meets chunk i of the receiver on the same socket. Chunks are
// whole 128-byte lines: an LL128 line (flag last) never straddles two sockets, so its bytes land
// in order like any single socket's.
void SocketLink::post_bytes(char* buf, size_t n, Xfer* x, bool send) {
  if (n == 0) return;
  size_t* next = send ? &next_send_sock_ : &next_recv_sock_;
  const size_t nsocks = data_fds_.size();
  size_t chunks = std::min(nsocks, (n + kChunkSpan - 1) / kChunkSpan);
  const size_t chunk = ((n + chunks - 1) / chunks + kLine - 1) / kLine * kLine;
  chunks = (n + chunk - 1) / chunk;
  x->pending.fetch_add(int(chunks), std::memory_order_relaxed);
  const size_t nthreads = workers_.size();
  for (size_t i = 0; i < chunks; ++i) {
    const size_t s = (*next + i) % nsocks;
    const size_t off = i * chunk;
    workers_[s % nthreads]->push(int(s / nthreads), send, buf + off, std::min(chunk, n - off), x);
  }
  *next = (*next + chunks) % nsocks;
}

// ---- the engine's calls -------------------------------------------------------------------------

ncclResult_t SocketLink::check_stalls() {
  if (stall_ms_ <= 0) return ncclSuccess;
  bool waiting = false;
  for (const Landing& l : landing_) waiting |= !l.x.done();
  // The clock only while bytes are awaited: the progress thread polls constantly, and most polls
  // find nothing on its way (inline messages land as their record is read).
  if (!waiting) {
    landing_progress_ms_ = 0;
    return ncclSuccess;
  }
  const int64_t now = now_ms();
  const uint64_t got = received_.load(std::memory_order_relaxed);
  if (landing_progress_ms_ == 0 || got != received_seen_) {
    received_seen_ = got;
    landing_progress_ms_ = now;
    return ncclSuccess;
  }
  if (now - landing_progress_ms_ <= stall_ms_) return ncclSuccess;
  size_t n = 0;
  for (const Landing& l : landing_) n += !l.x.done();
  return fail(ncclRemoteError, "peer " + peer_ + " stopped in the middle of " + std::to_string(n) +
                                   " message(s) announced by their headers: no byte for " + std::to_string(stall_ms_) +
                                   " ms (NCCL_ZIP_SOCKET_TIMEOUT_MS)");
}

ncclResult_t SocketLink::progress() {
  if (err_.code() != ncclSuccess) return err_.code();
  ZIP_CHECK(check_stalls());
  ZIP_CHECK(send_records());
  // Records after an inline message's bytes wait for them all.
  while (recv_inline_rest() && headers_awaited_ > 0) {
    HeaderRecord r;
    const char* rec = nullptr;
    size_t len = 0, have = 0;
    ZIP_CHECK(next_record(kMaxRecord, sizeof r, &rec, &len, &have));
    if (len == 0) break;
    if (len >= sizeof r) std::memcpy(&r, rec, sizeof r);
    if (len < sizeof r || r.type != kHeader) return fail(ncclRemoteError, "protocol error: bad control record from " + peer_);
    if ((r.flags & kEager) && int32_t(r.seq - placements_posted_) >= 0) {
      // A sender goes at most kMaxRequests (NCCL_ZIP_SOCKET_EAGER's bound) beyond the receives it
      // has seen, unless told to push: further is no honest peer's, and would hold the stream at
      // this record for good.
      if (!push_ever_ && r.seq - placements_posted_ >= kMaxRequests)
        return fail(ncclRemoteError, "protocol error: message " + std::to_string(r.seq) + " sent ahead of its receive, " +
                                         std::to_string(r.seq - placements_posted_) + " beyond the receives posted");
      in_off_ -= 4 + have;  // sent ahead of a receive not posted yet: it waits at the head
      break;
    }
    ZIP_CHECK(on_header(r, rec + sizeof r, len - sizeof r, have - sizeof r));
  }
  return err_.code();
}

bool SocketLink::recv_inline_rest() {
  while (rest_.left > 0 && !peer_closed_) {
    const ssize_t r = ::recv(ctrl_fd_, rest_.dst, rest_.left, MSG_DONTWAIT);
    if (r > 0) {
      rest_.dst += r;
      rest_.left -= size_t(r);
      received_.fetch_add(uint64_t(r), std::memory_order_relaxed);  // check_stalls() sees it
      if (rest_.left == 0) rest_.x->piece_done();
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    peer_closed_ = true;
  }
  if (rest_.left > 0 && peer_closed_)  // everything the peer sent is here: the message never completes
    fail(ncclRemoteError, "peer " + peer_ + " closed the connection in the middle of an inline message (" +
                              std::to_string(rest_.left) + " of its bytes missing)");
  return rest_.left == 0;
}

ncclResult_t SocketLink::post_cts(const ClearToSend& cts) {
  Posted& slot = posted_[cts.seq % kMaxRequests];
  if (slot.in_use || cts.n == 0 || cts.n > kMaxRecvs) return fail(ncclInternalError, "clear-to-send posted out of turn");
  bool offers = false;
  for (uint32_t i = 0; i < cts.n; ++i) offers |= cts.p[i].staging_bytes > 0;
  const bool bounded = cts.push_ahead != kPushAny;
  const uint32_t until = placements_posted_ + cts.n + (bounded ? cts.push_ahead : 0);
  // A push said without a bound cannot be bounded after the fact (the sender may be anywhere
  // ahead): a receive that wants a bound then sends its clear-to-send, and the next starts anew.
  if (offers || !push_ || !cts.pushable || (push_said_ && !grant_bounded_ && bounded)) {
    CtsRecord r{};
    r.type = kCts;
    r.seq = cts.seq;
    r.n = cts.n;
    r.first = placements_posted_;
    for (uint32_t i = 0; i < cts.n; ++i) {
      const Placement& p = cts.p[i];
      r.e[i].tag = p.tag;
      r.e[i].flags = p.staging_bytes ? uint32_t(kCompressOk) : 0u;
      r.e[i].capacity = p.capacity;
      r.e[i].staging_bytes = p.staging_bytes;
    }
    queue_record(&r, uint32_t(sizeof r), nullptr);
    push_said_ = false;
  } else if (!push_said_ || (grant_bounded_ && (!bounded || int32_t(until - grant_until_) > 0))) {
    // Raw only: the sender need not wait for this receive, nor for the next (up to the bound);
    // said once, then again only to move the bound on or lift it.
    if (!push_said_) grant_first_ = placements_posted_;
    const PushRecord r{kPush, grant_first_, bounded ? until : 0u, bounded ? kPushBounded : 0u};
    queue_record(&r, uint32_t(sizeof r), nullptr);
    push_said_ = push_ever_ = true;
    grant_bounded_ = bounded;
    grant_until_ = until;
  }
  slot.cts = cts;
  slot.first = placements_posted_;
  placements_posted_ += cts.n;
  slot.headers_seen = 0;
  slot.in_use = true;
  headers_awaited_ += cts.n;
  return progress();
}

ncclResult_t SocketLink::place_eager(HeaderRecord* r) {
  const uint32_t index = r->seq;
  const int32_t tag = int32_t(r->sub);
  if ((r->flags & kCompressed) || !(r->flags & kInline || push_ever_) || ((r->flags & kPushed) && !push_ever_))
    return fail(ncclRemoteError, "protocol error: message " + std::to_string(index) + " sent ahead of its receive is not raw" +
                                     (push_ever_ ? "" : " inside its header"));
  for (const Posted& slot : posted_) {
    if (!slot.in_use || index - slot.first >= slot.cts.n) continue;
    const uint32_t sub = placement_for_tag(slot.cts, slot.headers_seen, tag);
    if (sub < slot.cts.n) {
      r->seq = slot.cts.seq;
      r->sub = sub;
      return ncclSuccess;
    }
    return fail(ncclRemoteError, "message " + std::to_string(index) + " (tag " + std::to_string(tag) +
                                     ") sent ahead of its receive matches no open receive of seq " +
                                     std::to_string(slot.cts.seq) + " (tags" + placement_tags(slot.cts) +
                                     "): collective mismatch");
  }
  return fail(ncclRemoteError,
              "protocol error: message " + std::to_string(index) + " sent ahead of its receive for no posted receive");
}

ncclResult_t SocketLink::on_header(HeaderRecord r, const char* payload, size_t payload_len, size_t have) {
  if (r.flags & kEager) ZIP_CHECK(place_eager(&r));
  Posted& slot = posted_[r.seq % kMaxRequests];
  if (!slot.in_use || slot.cts.seq != r.seq || r.sub >= slot.cts.n || (slot.headers_seen >> r.sub & 1))
    return fail(ncclRemoteError, "protocol error: data header for no posted receive");
  // A peer speaking a protocol this one does not know; pushed only sent ahead.
  if ((r.flags & ~uint32_t(kCompressed | kRawWhyMask | kInline | kEager | kPushed)) ||
      (r.flags & (kEager | kPushed)) == kPushed)
    return fail(ncclRemoteError, "protocol error: data header (seq " + std::to_string(r.seq) + ") with unknown flags " +
                                     std::to_string(r.flags));
  const bool inline_bytes = r.flags & kInline;
  if (payload_len != (inline_bytes ? r.wire_bytes : 0))
    return fail(ncclRemoteError, "protocol error: data header (seq " + std::to_string(r.seq) + ") for " +
                                     std::to_string(r.wire_bytes) + " bytes" + (inline_bytes ? " inline" : "") +
                                     " in a record carrying " + std::to_string(payload_len));
  MessageHeader h;
  h.seq = r.seq;
  h.sub = r.sub;
  h.compressed = r.flags & kCompressed;
  h.why = RawWhy((r.flags & kRawWhyMask) >> kRawWhyShift);
  h.pushed = r.flags & kPushed;
  h.wire_bytes = r.wire_bytes;
  h.orig_bytes = r.orig_bytes;
  const Placement& p = slot.cts.p[r.sub];
  if (const char* why = placement_misfit(p, h))
    return fail(ncclRemoteError, "protocol error: data header (seq " + std::to_string(r.seq) + ", " +
                                     std::to_string(r.orig_bytes) + " bytes) does not fit the receive: " + why);
  slot.headers_seen |= 1u << r.sub;
  if (slot.headers_seen == (1u << slot.cts.n) - 1) slot.in_use = false;
  --headers_awaited_;
  Landing& l = landing_.emplace_back();
  l.h = h;
  char* dst = reinterpret_cast<char*>(h.compressed ? p.staging : p.target);
  if (inline_bytes) {
    copy_lines_in_order(dst, payload, have);
    if (have < payload_len) {  // the rest straight from the socket
      l.x.pending.fetch_add(1, std::memory_order_relaxed);
      rest_ = {dst + have, payload_len - have, &l.x};
      recv_inline_rest();
    }
  } else {
    post_bytes(dst, h.wire_bytes, &l.x, false);
  }
  return ncclSuccess;
}

ncclResult_t SocketLink::poll_arrival(MessageHeader* h, bool* got) {
  *got = false;
  if (err_.code() != ncclSuccess) return err_.code();
  for (auto it = landing_.begin(); it != landing_.end(); ++it) {
    if (!it->x.done()) continue;
    *h = it->h;
    *got = true;
    landing_.erase(it);
    return ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t SocketLink::poll_cts(ClearToSend* cts, bool* got) {
  *got = false;
  if (err_.code() != ncclSuccess) return err_.code();
  CtsRecord r;
  const char* rec = nullptr;
  size_t len = 0, have = 0;
  ZIP_CHECK(next_record(sizeof r, sizeof r, &rec, &len, &have));
  if (len == 0) return ncclSuccess;
  if (len == sizeof(PushRecord)) {
    PushRecord p;
    std::memcpy(&p, rec, sizeof p);
    // Said when the receives stop offering, at the placement where the last record's end; again
    // (same first) only to move its bound on or lift it.
    const bool bounded = p.flags & kPushBounded;
    const bool again = pushing_ && push_bounded_ && p.first == push_first_ && (!bounded || int32_t(p.until - push_until_) > 0);
    if (p.type != kPush || (p.flags & ~kPushBounded) || (!bounded && p.until != 0) ||
        !(again || (!pushing_ && p.first == next_first_)))
      return fail(ncclRemoteError, "protocol error: unexpected push record (placement " + std::to_string(p.first) +
                                       ", " + std::to_string(pushing_ ? push_first_ : next_first_) + " expected)");
    pushing_ = push_seen_ = true;
    push_bounded_ = bounded;
    push_first_ = p.first;
    push_until_ = p.until;
    cts->n = 0;
    cts->first = p.first;
    cts->push_bounded = bounded;
    cts->push_until = p.until;
    *got = true;
    return ncclSuccess;
  }
  if (len == sizeof r) std::memcpy(&r, rec, sizeof r);
  // After a push, receives that had no record took sequence numbers and placements: later ones,
  // never earlier ones, come next.
  const bool in_turn = pushing_ ? int32_t(r.seq - next_cts_seq_) >= 0 && int32_t(r.first - next_first_) >= 0
                                : r.seq == next_cts_seq_ && r.first == next_first_;
  if (len != sizeof r || r.type != kCts || r.n == 0 || r.n > kMaxRecvs || !in_turn)
    return fail(ncclRemoteError, "protocol error: unexpected clear-to-send record");
  bool unknown = false;
  for (uint32_t i = 0; i < r.n; ++i) unknown |= (r.e[i].flags & ~uint32_t(kCompressOk)) != 0;
  if (unknown)
    return fail(ncclRemoteError, "protocol error: clear-to-send (seq " + std::to_string(r.seq) + ") with unknown flags");
  next_cts_seq_ = r.seq + 1;
  next_first_ = r.first + r.n;
  pushing_ = false;
  cts->seq = r.seq;
  cts->n = r.n;
  cts->first = r.first;
  for (uint32_t i = 0; i < r.n; ++i) {
    Placement& p = cts->p[i];
    p = Placement{};
    p.tag = r.e[i].tag;
    p.capacity = r.e[i].capacity;
    p.staging_bytes = (r.e[i].flags & kCompressOk) ? r.e[i].staging_bytes : 0;
  }
  *got = true;
  return ncclSuccess;
}

ncclResult_t SocketLink::send_header(const HeaderRecord& r, const void* buf, Xfer* x) {
  if (err_.code() != ncclSuccess) return err_.code();
  if (out_reset_) return fail(ncclRemoteError, "control send to " + peer_ + ": " + std::strerror(ECONNRESET));
  if (r.flags & kInline) {
    queue_record(&r, uint32_t(sizeof r), x, buf, uint32_t(r.wire_bytes));
  } else {
    queue_record(&r, uint32_t(sizeof r), x);
    post_bytes(const_cast<char*>(static_cast<const char*>(buf)), r.wire_bytes, x, true);
  }
  return send_records();
}

ncclResult_t SocketLink::post_message(const MessageHeader& h, const Placement&, const void* buf, Xfer* x) {
  const uint32_t flags = (h.compressed ? uint32_t(kCompressed) : 0u) | uint32_t(h.why) << kRawWhyShift |
                         (inline_.take(h.wire_bytes) ? uint32_t(kInline) : 0u);
  return send_header({kHeader, h.seq, h.sub, flags, h.orig_bytes, h.wire_bytes}, buf, x);
}

ncclResult_t SocketLink::post_eager(uint32_t index, int32_t tag, const void* buf, size_t bytes, RawWhy why, bool pushed,
                                    Xfer* x) {
  if (bytes > eager_bytes() && !push_seen_) return fail(ncclInternalError, "eager send of " + std::to_string(bytes) + " bytes");
  const uint32_t flags = (inline_.take(bytes) ? uint32_t(kInline) : 0u) | uint32_t(kEager) |
                         (pushed ? uint32_t(kPushed) : 0u) | uint32_t(why) << kRawWhyShift;
  return send_header({kHeader, index, uint32_t(tag), flags, bytes, bytes}, buf, x);
}

}  // namespace zipccl::tcp
