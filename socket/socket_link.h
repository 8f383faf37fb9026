// One socket link: a control socket carrying clear-to-send and header records (socket_wire.h),
// and NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD data sockets over which each message's bytes
// are striped, moved by helper threads (socket_worker.h); a small message rides inside its header
// on the control socket instead (NCCL_ZIP_SOCKET_INLINE). The receiver places every message
// itself: a header names the placement, and its bytes are received straight into the target or
// the staging buffer the clear-to-send advertised (an inline one too, but for what the control
// socket's read-ahead brought with its header, copied). An inline message is sent from its buffer.
// An eager message (Link::post_eager) is an inline one sent before its clear-to-send: its record
// waits, unread, at the head of the control stream until its receive is posted, so the sender's
// socket buffers, not this process, hold what a sender sends ahead. A receive its sender need not
// wait for (ClearToSend::pushable) needs no clear-to-send: the receiver says kPush once, and its
// sender pushes every message from then on (any size) until another receive sends a clear-to-send.
#pragma once

#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "inline_rule.h"
#include "socket_wire.h"
#include "socket_worker.h"
#include "transport.h"

namespace zipccl::tcp {

class SocketLink : public Link {
 public:
  // fds[0] is the control socket, the rest data sockets; the link owns them all. pacer: its
  // device's send cap, or null. stall_ms: a peer that stops in the middle of a control record or
  // of a message's bytes for this long is an error (0: never; one that closes there is one at
  // once); NCCL_ZIP_SOCKET_TIMEOUT_MS.
  // inline_rule: which messages this end sends inside their header (inline_rule.h;
  // NCCL_ZIP_SOCKET_INLINE, NCCL_ZIP_SOCKET_INLINE_LONE). It receives inline messages of any size allowed.
  // eager_ahead: inline messages this end may send ahead of clear-to-sends (NCCL_ZIP_SOCKET_EAGER).
  // push: this end's pushable receives let the sender push (NCCL_ZIP_SOCKET_PUSH).
  SocketLink(std::vector<int> fds, std::string peer, std::shared_ptr<Pacer> pacer, int64_t stall_ms,
             InlineRule inline_rule, uint32_t eager_ahead, bool push = false);
  ~SocketLink() override;

  ncclResult_t post_cts(const ClearToSend& cts) override;
  ncclResult_t poll_arrival(MessageHeader* h, bool* got) override;
  ncclResult_t poll_cts(ClearToSend* cts, bool* got) override;
  ncclResult_t post_message(const MessageHeader& h, const Placement& to, const void* buf, Xfer* x) override;
  size_t eager_bytes() const override { return eager_ahead_ ? inline_.always() : 0; }
  uint32_t eager_ahead() const override { return eager_ahead_; }
  ncclResult_t post_eager(uint32_t index, int32_t tag, const void* buf, size_t bytes, RawWhy why, bool pushed,
                          Xfer* x) override;
  ncclResult_t progress() override;
  ncclResult_t error() const override { return err_.code(); }
  std::string error_text() const override { return err_.text(); }
  bool peer_closed() const override;
  std::string peer() const override { return peer_; }
  // Bytes of records held for sending (sent ones included until dropped): bounded however long the
  // control socket stays busy.
  size_t held_record_bytes() const { return out_.size(); }

 private:
  struct Posted {
    ClearToSend cts;
    uint32_t first = 0;         // the number of its placement 0 (Link::post_eager)
    uint32_t headers_seen = 0;  // bit i: placement i's header has come
    bool in_use = false;
  };
  struct Landing {
    MessageHeader h;
    Xfer x;
  };

  ncclResult_t fail(ncclResult_t code, const std::string& why);
  // Control records (rec, then `more` bytes of payload, which stay where they are until sent):
  // queued whole, sent as the socket and the pacer take them; x (if any) counts one piece down
  // once the record is all on the socket.
  void queue_record(const void* rec, uint32_t len, Xfer* x, const void* more = nullptr, uint32_t more_len = 0);
  ncclResult_t send_records();
  // Frees out_ of the records already sent: all of it once nothing is queued, else those before
  // the first record still queued when they are most of a large buffer.
  void drop_sent_records();
  // The next record of at most cap bytes whose first `head` bytes are here, as a view into in_
  // valid until the next call: *len its length (0: none yet), *have the bytes of it here, which
  // are taken (the rest, at most *len - head, is the socket's next bytes). Reads the socket only
  // when no such record is buffered: the progress thread polls constantly, and a syscall each time
  // would add up.
  ncclResult_t next_record(size_t cap, size_t head, const char** rec, size_t* len, size_t* have);
  // Reads what the socket has, into a buffer that holds `need` bytes from the first untaken one.
  void read_socket(size_t need);
  // A header record, and the payload that follows it in the record (inline messages only), of
  // which `have` bytes are at `payload`, the rest the control socket's next bytes.
  ncclResult_t on_header(HeaderRecord r, const char* payload, size_t payload_len, size_t have);
  // Receives what is left of an inline message into its buffer; whether nothing is. A peer that
  // closed before sending it all fails the link.
  bool recv_inline_rest();
  // An eager message's index and tag (r->seq, r->sub) made into the seq and sub it fills.
  ncclResult_t place_eager(HeaderRecord* r);
  // Queues a header record (with the message's bytes when inline) and sends what it can.
  ncclResult_t send_header(const HeaderRecord& r, const void* buf, Xfer* x);
  // Stripes [buf, buf + n) over the data sockets; both ends split a message the same way.
  void post_bytes(char* buf, size_t n, Xfer* x, bool send);

  // A peer stalled in the middle of a record or of bytes it must still send: an error after
  // stall_ms_ without progress.
  ncclResult_t check_stalls();

  std::string peer_;
  const int64_t stall_ms_;
  int64_t in_progress_ms_ = 0;          // last bytes on the control socket
  std::atomic<uint64_t> received_{0};   // bytes the data sockets received
  uint64_t received_seen_ = 0;
  int64_t landing_progress_ms_ = 0;     // last progress of the messages on their way in (0: none awaited)
  int ctrl_fd_;
  std::vector<int> data_fds_;
  StickyError err_;
  std::shared_ptr<Pacer> pacer_;  // before the workers, which use it until they are joined
  std::vector<std::unique_ptr<SocketWorker>> workers_;

  // What the control socket still has to send, in order: spans of out_ (records) and of the
  // callers' buffers (inline messages, sent from where they are, not copied).
  struct OutSpan {
    const char* ext;  // null: out_ from own_off
    size_t own_off;
    size_t len;
  };
  std::vector<char> out_;
  std::deque<OutSpan> out_spans_;
  size_t out_head_off_ = 0;    // bytes of out_spans_.front() on the socket
  uint64_t out_sent_ = 0;      // bytes ever sent on the control socket
  uint64_t out_queued_ = 0;    // bytes ever queued
  bool out_reset_ = false;     // the peer reset the control socket: what is queued goes nowhere
  std::deque<std::pair<uint64_t, Xfer*>> record_ends_;  // (stream offset where it ends, its xfer)
  const InlineRule inline_;
  const uint32_t eager_ahead_;
  const bool push_;
  std::vector<char> in_;       // control bytes read ahead: kReadAhead at most
  size_t in_off_ = 0;          // bytes of in_ already taken as records
  size_t in_end_ = 0;          // bytes of in_ filled
  struct {
    char* dst = nullptr;
    size_t left = 0;
    Xfer* x = nullptr;
  } rest_;                     // an inline message's bytes still on the control socket
  bool peer_closed_ = false;
  size_t next_send_sock_ = 0, next_recv_sock_ = 0;

  Posted posted_[kMaxRequests];  // receiving end, by seq % kMaxRequests
  uint32_t headers_awaited_ = 0;
  uint32_t placements_posted_ = 0;  // placements of all clear-to-sends posted
  std::list<Landing> landing_;   // messages whose header came, bytes on their way (stable addresses)
  bool push_said_ = false;       // receiving end: the last record sent was a PushRecord
  bool push_ever_ = false;       // ... one was ever sent: a sender may be any distance ahead
  bool grant_bounded_ = false;   // ... the push said is bounded, up to grant_until_
  uint32_t grant_first_ = 0, grant_until_ = 0;
  uint32_t next_cts_seq_ = 0;    // sending end
  uint32_t next_first_ = 0;      // ... the first placement the receiver's next record may name
  bool pushing_ = false;         // ... the last record read was a PushRecord
  bool push_bounded_ = false;    // ... bounded, up to push_until_
  uint32_t push_first_ = 0, push_until_ = 0;
  bool push_seen_ = false;       // ... one was ever read: eager messages of any size
};

}  // namespace zipccl::tcp
