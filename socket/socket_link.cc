#include "socket_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "log.h"
#include "socket_params.h"
#include "socket_wire.h"
#include "tcp_bootstrap.h"

namespace zipccl::tcp {
namespace {

constexpr size_t kMinChunk = 64 << 10;  // smaller pieces cost more in syscalls than they gain
constexpr size_t kLine = 128;

}  // namespace

SocketLink::SocketLink(std::vector<int> fds, std::string peer, std::shared_ptr<Pacer> pacer, int64_t stall_ms)
    : peer_(std::move(peer)), stall_ms_(stall_ms), pacer_(std::move(pacer)) {
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
  close(ctrl_fd_);
  for (int fd : data_fds_) close(fd);
}

ncclResult_t SocketLink::fail(ncclResult_t code, const std::string& why) {
  err_.set(code, why);
  return err_.code();
}

// ---- control records ----------------------------------------------------------------------------

void SocketLink::queue_record(const void* rec, uint32_t len, Xfer* x) {
  const char* p = static_cast<const char*>(rec);
  out_.insert(out_.end(), reinterpret_cast<const char*>(&len), reinterpret_cast<const char*>(&len) + 4);
  out_.insert(out_.end(), p, p + len);
  out_queued_ += 4 + len;
  if (x) {
    x->pending.fetch_add(1, std::memory_order_relaxed);
    record_ends_.emplace_back(out_queued_, x);
  }
}

ncclResult_t SocketLink::send_records() {
  while (out_off_ < out_.size()) {
    const ssize_t r = ::send(ctrl_fd_, out_.data() + out_off_, out_.size() - out_off_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      out_off_ += size_t(r);
      out_sent_ += uint64_t(r);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    return fail(ncclRemoteError, "control send to " + peer_ + ": " + std::strerror(errno));
  }
  if (out_off_ == out_.size()) {
    out_.clear();
    out_off_ = 0;
  }
  while (!record_ends_.empty() && record_ends_.front().first <= out_sent_) {
    record_ends_.front().second->piece_done();
    record_ends_.pop_front();
  }
  return ncclSuccess;
}

void SocketLink::read_socket() {
  if (in_off_ > 0 && in_off_ * 2 >= in_.size()) {  // drop what was taken, in amortised O(1)
    in_.erase(in_.begin(), in_.begin() + long(in_off_));
    in_off_ = 0;
  }
  char tmp[16384];
  while (!peer_closed_) {
    const ssize_t r = ::recv(ctrl_fd_, tmp, sizeof tmp, MSG_DONTWAIT);
    if (r > 0) {
      in_.insert(in_.end(), tmp, tmp + r);
      in_progress_ms_ = now_ms();
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    // The peer closed (or reset) its end. Not an error by itself: data already on the data
    // sockets still arrives; the engine fails whatever still waits on this peer.
    peer_closed_ = true;
  }
}

ncclResult_t SocketLink::next_record(void* buf, size_t cap, size_t* len) {
  *len = 0;
  auto whole = [&](uint32_t* l) {
    if (in_.size() - in_off_ < 4) return false;
    std::memcpy(l, in_.data() + in_off_, 4);
    return in_.size() - in_off_ >= 4 + size_t(*l);
  };
  // Part of a record and no more bytes for stall_ms_: the peer stopped in its middle.
  auto stalled = [&] { return stall_ms_ > 0 && now_ms() - in_progress_ms_ > stall_ms_; };
  auto stopped = [&](const std::string& what) {
    return fail(ncclRemoteError, "peer " + peer_ + " stopped in the middle of a control record (" + what + ") for " +
                                     std::to_string(stall_ms_) + " ms (NCCL_ZIP_SOCKET_TIMEOUT_MS)");
  };
  uint32_t l = 0;
  if (!whole(&l)) read_socket();
  if (in_.size() - in_off_ < 4) {
    if (in_.size() > in_off_ && stalled()) return stopped(std::to_string(in_.size() - in_off_) + " bytes of its length");
    return ncclSuccess;
  }
  std::memcpy(&l, in_.data() + in_off_, 4);
  // Every record has a type: an empty one is garbage, and a stream of them would keep the
  // receiver busy without end.
  if (l == 0 || l > kMaxRecord || l > cap)
    return fail(ncclRemoteError, "protocol error: control record of " + std::to_string(l) + " bytes from " + peer_);
  if (!whole(&l)) {
    if (stalled()) return stopped(std::to_string(in_.size() - in_off_ - 4) + " of " + std::to_string(l) + " bytes");
    return ncclSuccess;
  }
  std::memcpy(buf, in_.data() + in_off_ + 4, l);
  in_off_ += 4 + l;
  *len = l;
  return ncclSuccess;
}

// Gone, and everything it sent has been taken: no record buffered, no message on its way.
bool SocketLink::peer_closed() const { return peer_closed_ && in_.size() - in_off_ < 4 && landing_.empty(); }

// ---- data sockets -------------------------------------------------------------------------------

// Both ends split a message the same way (it depends only on n and on how many messages came
// before), so chunk i of the sender meets chunk i of the receiver on the same socket. Chunks are
// whole 128-byte lines: an LL128 line (flag last) never straddles two sockets, so its bytes land
// in order like any single socket's.
void SocketLink::post_bytes(char* buf, size_t n, Xfer* x, bool send) {
  if (n == 0) return;
  size_t* next = send ? &next_send_sock_ : &next_recv_sock_;
  const size_t nsocks = data_fds_.size();
  size_t chunks = std::min(nsocks, (n + kMinChunk - 1) / kMinChunk);
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
  const int64_t now = now_ms();
  const uint64_t got = received_.load(std::memory_order_relaxed);
  bool waiting = false;
  for (const Landing& l : landing_) waiting |= !l.x.done();
  if (!waiting || got != received_seen_) {
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
  while (headers_awaited_ > 0) {
    HeaderRecord r;
    size_t len = 0;
    ZIP_CHECK(next_record(&r, sizeof r, &len));
    if (len == 0) break;
    if (len != sizeof r || r.type != kHeader) return fail(ncclRemoteError, "protocol error: bad control record from " + peer_);
    ZIP_CHECK(on_header(r));
  }
  return err_.code();
}

ncclResult_t SocketLink::post_cts(const ClearToSend& cts) {
  Posted& slot = posted_[cts.seq % kMaxRequests];
  if (slot.in_use || cts.n == 0 || cts.n > kMaxRecvs) return fail(ncclInternalError, "clear-to-send posted out of turn");
  CtsRecord r{};
  r.type = kCts;
  r.seq = cts.seq;
  r.n = cts.n;
  for (uint32_t i = 0; i < cts.n; ++i) {
    const Placement& p = cts.p[i];
    r.e[i].tag = p.tag;
    r.e[i].flags = p.staging_bytes ? uint32_t(kCompressOk) : 0u;
    r.e[i].capacity = p.capacity;
    r.e[i].staging_bytes = p.staging_bytes;
  }
  queue_record(&r, uint32_t(sizeof r), nullptr);
  slot.cts = cts;
  slot.headers_seen = 0;
  slot.in_use = true;
  headers_awaited_ += cts.n;
  return progress();
}

ncclResult_t SocketLink::on_header(const HeaderRecord& r) {
  Posted& slot = posted_[r.seq % kMaxRequests];
  if (!slot.in_use || slot.cts.seq != r.seq || r.sub >= slot.cts.n || (slot.headers_seen >> r.sub & 1))
    return fail(ncclRemoteError, "protocol error: data header for no posted receive");
  if (r.flags & ~uint32_t(kCompressed | kRawWhyMask))  // a peer speaking a protocol this one does not know
    return fail(ncclRemoteError, "protocol error: data header (seq " + std::to_string(r.seq) + ") with unknown flags " +
                                     std::to_string(r.flags));
  MessageHeader h;
  h.seq = r.seq;
  h.sub = r.sub;
  h.compressed = r.flags & kCompressed;
  h.why = RawWhy((r.flags & kRawWhyMask) >> kRawWhyShift);
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
  post_bytes(reinterpret_cast<char*>(h.compressed ? p.staging : p.target), h.wire_bytes, &l.x, false);
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
  size_t len = 0;
  ZIP_CHECK(next_record(&r, sizeof r, &len));
  if (len == 0) return ncclSuccess;
  if (len != sizeof r || r.type != kCts || r.n == 0 || r.n > kMaxRecvs || r.seq != next_cts_seq_)
    return fail(ncclRemoteError, "protocol error: unexpected clear-to-send record");
  bool unknown = r.reserved != 0;
  for (uint32_t i = 0; i < r.n; ++i) unknown |= (r.e[i].flags & ~uint32_t(kCompressOk)) != 0;
  if (unknown)
    return fail(ncclRemoteError, "protocol error: clear-to-send (seq " + std::to_string(r.seq) +
                                     ") with unknown flags or a non-zero reserved field");
  ++next_cts_seq_;
  cts->seq = r.seq;
  cts->n = r.n;
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

ncclResult_t SocketLink::post_message(const MessageHeader& h, const Placement&, const void* buf, Xfer* x) {
  if (err_.code() != ncclSuccess) return err_.code();
  const uint32_t flags = (h.compressed ? uint32_t(kCompressed) : 0u) | uint32_t(h.why) << kRawWhyShift;
  const HeaderRecord r{kHeader, h.seq, h.sub, flags, h.orig_bytes, h.wire_bytes};
  queue_record(&r, uint32_t(sizeof r), x);
  post_bytes(const_cast<char*>(static_cast<const char*>(buf)), h.wire_bytes, x, true);
  return send_records();
}

}  // namespace zipccl::tcp
