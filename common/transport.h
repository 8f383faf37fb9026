// What the engine needs from a network transport; the socket transport (socket/) and the ibverbs
// transport (verbs/) implement it side by side.
//
// The protocol is receiver-driven, one control message per receive. The receiver posts a
// clear-to-send: for each of its (up to kMaxRecvs grouped) receives, where the bytes may land,
// raw into the target buffer or compressed into a staging buffer. The sender matches each isend
// to one such placement and sends one message into it; the message's header (which placement,
// raw or compressed, how many bytes) travels with the data, so the receiver learns of the
// message when all of it has landed. On RDMA the clear-to-send is one RDMA write into the
// sender's memory and a message is RDMA writes, the last carrying the header in its immediate;
// over TCP the same records are framed on a control socket and the bytes are striped over data
// sockets.
//
// Threading: the methods of one Listener/Connector/Link are called by one thread at a time (the
// engine serialises them); a transport may complete transfers from threads of its own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "clock.h"
#include "status.h"

namespace zipccl {

constexpr uint32_t kMaxRecvs = 8;      // grouped receives per clear-to-send (props.maxRecvs)
constexpr uint32_t kMaxRequests = 32;  // receives in flight per connection (NCCL's limit)

// One posted transfer. The engine owns it and keeps it alive until done() and until the link is
// closed; the transport counts its pieces down from its own threads (piece_done).
struct Xfer {
  std::atomic<int> pending{0};
  // When the latest of its pieces went through, on the transport's threads: the link's time, which
  // a tester that looks at many transfers at once would read as a burst.
  std::atomic<int64_t> end_ns{0};
  // When a transport thread first took up one of its pieces (0: as it was posted, a NIC's queue;
  // the poster clears it): a thread asleep when the transfer came does not count its wake-up as
  // the link's time.
  std::atomic<int64_t> start_ns{0};
  bool done() const { return pending.load(std::memory_order_acquire) == 0; }
  void piece_started() {
    const int64_t t = now_ns();
    int64_t s = start_ns.load(std::memory_order_relaxed);
    while ((s == 0 || t < s) && !start_ns.compare_exchange_weak(s, t, std::memory_order_relaxed)) {
    }
  }
  void piece_done() {
    const int64_t t = now_ns();
    int64_t e = end_ns.load(std::memory_order_relaxed);
    while (e < t && !end_ns.compare_exchange_weak(e, t, std::memory_order_relaxed)) {
    }
    pending.fetch_sub(1, std::memory_order_acq_rel);
  }
};

// Where the bytes of one receive may land. The receiver fills it with its own buffers; the sender
// gets it back from poll_cts() with the transport's addressing of them in target/staging (RDMA
// addresses and keys; the socket transport sends none).
struct Placement {
  int32_t tag = 0;
  uint64_t capacity = 0;       // raw bytes the receive takes, landing at target
  uint64_t staging_bytes = 0;  // compressed bytes it takes, landing at staging; 0: raw only
  uint64_t target = 0, staging = 0;
  uint32_t target_key = 0, staging_key = 0;
};

constexpr uint32_t kPushAny = UINT32_MAX;  // ClearToSend::push_ahead: no bound

struct ClearToSend {
  uint32_t seq = 0;    // consecutive from 0 on each link
  uint32_t n = 0;      // placements used, 1..kMaxRecvs; 0 from poll_cts: "push from `first` on"
  uint32_t first = 0;  // placement index of p[0] on the link (poll_cts fills it)
  // post_cts: its sender need not wait for it (a socket link's push): none of its receives takes
  // compressed bytes, nor is one a probe the sender must see (compression off, LL/LL128, no codec,
  // or an auto-mode gate's receive that neither offers nor probes: OfferGate::push_ahead()).
  bool pushable = false;
  // post_cts, pushable: placements past this receive's that its sender may push before it sees a
  // later receive's record (one that may be a probe); kPushAny: any number.
  uint32_t push_ahead = kPushAny;
  // poll_cts, n = 0: the sender may push the placements before push_until only (push_bounded), or
  // every one.
  bool push_bounded = false;
  uint32_t push_until = 0;
  Placement p[kMaxRecvs];
};

// Why a raw message went raw, as its sender tells the receiver, whose offers of staging follow
// the sender's decisions (engine/offer_gate.h) instead of guessing them from sizes.
enum class RawWhy : uint8_t {
  kUnsaid = 0,    // compressed, or a sender that does not say
  kSmall = 1,     // too small to pay for its coding on this link (alone and behind the bytes ahead)
  kDeclined = 2,  // the sender does not compress it: the data did not compress, the codec is
                  // slower than the link, compression is off, or its coding did not pay
  kWanted = 3,    // the sender would have compressed it: no staging was offered, its codec's
                  // kernel was not running, or it was busy (a queue that would idle the link)
};
constexpr uint32_t kRawWhyValues = 4;
// The largest message NCCL may hand a transport (its max_p2p_bytes): a verbs immediate carries a
// raw message's size in 29 bits beside its RawWhy.
constexpr size_t kMaxMessageBytes = size_t(1) << 28;

// What a message says about itself: the placement it fills (sub of clear-to-send seq), how it
// landed and its sizes.
struct MessageHeader {
  uint32_t seq = 0, sub = 0;
  bool compressed = false;
  RawWhy why = RawWhy::kUnsaid;  // raw messages only
  bool pushed = false;  // sent before its sender saw the receive (Link::post_eager): any offer unseen
  uint64_t wire_bytes = 0;  // bytes that landed (at staging when compressed, else at target)
  // Raw: wire_bytes. Compressed: the size it decodes to as the sender announced it, or 0 where
  // the transport does not carry it (the decoder then reads it from the message, within capacity).
  uint64_t orig_bytes = 0;
};

// Why a message cannot land in placement p (null when it can): the one check both transports
// apply before trusting a peer's header.
const char* placement_misfit(const Placement& p, const MessageHeader& h);

// The placement of cts that a message with `tag` fills: the first with that tag not in `filled`
// (bit i: placement i has its message), or cts.n where none is. The one rule by which a sender
// matches isends to a clear-to-send and a receiver places messages sent ahead of it.
uint32_t placement_for_tag(const ClearToSend& cts, uint32_t filled, int32_t tag);
// The tags of cts's placements, each after a space (" 3 3 7"), for the errors that list them.
std::string placement_tags(const ClearToSend& cts);

struct DeviceInfo {
  std::string name;      // e.g. "lo", "eth0", "mlx5_0"
  std::string pci_path;  // real /sys PCI path, empty for virtual interfaces
  int speed_mbps = 0;
  bool speed_known = true;  // false: speed_mbps is a guess (the kernel does not say)
  uint64_t guid = 0;     // NCCL groups devices of one NIC by it
  int port = 0;          // IB port number (NCCL's props.port)
  int max_comms = 65536;
  // GPUDirect RDMA: device memory registered by pointer (nvidia-peermem) or by DMA-BUF fd.
  bool gdr_peermem = false;
  bool gdr_dmabuf = false;
  // Receives into such memory must be flushed before the GPU reads them (NCCL's iflush).
  bool gdr_flush = false;
};

// A buffer registered with a transport (RDMA keys). Destroying it releases the registration,
// whatever became of the link it was made through.
class MemReg {
 public:
  virtual ~MemReg() = default;
};

// Transport-specific part of NCCL's 128-byte connection handle.
constexpr size_t kTransportHandleBytes = 112;

// One connection between a sending and a receiving end. Everything moves when the engine calls
// in (progress() or any other call); the transport's own threads, if any, only move bytes.
class Link {
 public:
  virtual ~Link() = default;

  // Receiving end. post_cts() never blocks (what the network does not take now is queued); the
  // placements' buffers stay valid until each has arrived. poll_arrival() returns, in any order,
  // the header of a message whose bytes have all landed (*got false when none has) as of the last
  // progress().
  virtual ncclResult_t post_cts(const ClearToSend& cts) = 0;
  virtual ncclResult_t poll_arrival(MessageHeader* h, bool* got) = 0;

  // Sending end. poll_cts() returns the receiver's clear-to-sends in order (reading the network
  // where it must: call it only when one is wanted). post_message() sends
  // h.wire_bytes from buf into placement `to` (placement h.sub of clear-to-send h.seq): messages
  // go out in (seq, sub) order, one per placement. x completes once buf may be reused and the
  // message is the network's.
  virtual ncclResult_t poll_cts(ClearToSend* cts, bool* got) = 0;
  virtual ncclResult_t post_message(const MessageHeader& h, const Placement& to, const void* buf, Xfer* x) = 0;

  // Eager sends, where a transport has them (none: 0 and 0): a raw message of at most
  // eager_bytes() may go before its clear-to-send, at most eager_ahead() messages beyond the
  // placements of the clear-to-sends the sender has taken. Placements are numbered across
  // clear-to-sends (seq 0's first, in sub order), and so are messages, in the order the sender
  // sends them; the one numbered `index` fills, of the clear-to-send holding placement `index`,
  // the first placement with its tag that no earlier message filled: the rule by which the sender
  // matches isends to a clear-to-send, applied by both ends. post_eager() sends message `index`
  // that way once every earlier message is with the link; the receiver places it once it posts
  // that receive, and poll_arrival() reports it with its seq and sub. x as in post_message().
  // A receiving link may let its sender push instead (poll_cts() then returns n = 0): from
  // placement `first` on, until the next clear-to-send, every message goes eager at once, raw,
  // whatever its size and however far ahead, or, bounded, up to push_until (a later n = 0 of the
  // same `first` moves it on); the clear-to-send that ends it may name placements already pushed
  // (their messages filled them).
  virtual size_t eager_bytes() const { return 0; }
  virtual uint32_t eager_ahead() const { return 0; }
  // pushed: sent without an offer to see (the receiver said push), so that its arrival tells the
  // receiver nothing of its offer (MessageHeader::pushed).
  virtual ncclResult_t post_eager(uint32_t index, int32_t tag, const void* buf, size_t bytes, RawWhy why, bool pushed,
                                  Xfer* x) {
    (void)index, (void)tag, (void)buf, (void)bytes, (void)why, (void)pushed, (void)x;
    return ncclInternalError;
  }

  // Moves what is queued; cheap when nothing is. Call on every progress step.
  virtual ncclResult_t progress() = 0;

  // Registers [data, data + size) with this link's device so that messages from or into it need
  // no registration of their own; *out stays null where the transport needs none.
  virtual ncclResult_t reg_mem(void* data, size_t size, std::unique_ptr<MemReg>* out) {
    (void)data, (void)size;
    out->reset();
    return ncclSuccess;
  }
  // GPUDirect RDMA (devices with gdr_peermem or gdr_dmabuf): registers device memory
  // [data, data + size) for the transport to move itself, through the DMA-BUF dmabuf_fd (data at
  // `offset` in it) when dmabuf_fd >= 0, else by pointer. for_receives: receives into it will be
  // flushed (flush() below), so the means to flush are set up now, outside the data path.
  // Transports whose devices have neither flag are never asked (the default fails).
  virtual ncclResult_t reg_device_mem(void* data, size_t size, int dmabuf_fd, uint64_t offset, bool for_receives,
                                      std::unique_ptr<MemReg>* out) {
    (void)data, (void)size, (void)dmabuf_fd, (void)offset, (void)for_receives, (void)out;
    return ncclInternalError;
  }
  // Makes the bytes of arrived messages in device memory registered for_receives visible to the
  // GPU's later reads (NCCL's iflush); x completes when they are. data: a byte inside.
  virtual ncclResult_t flush(const void* data, Xfer* x) {
    (void)data, (void)x;
    return ncclInternalError;
  }

  // Sticky error: once a link fails, every call reports it.
  virtual ncclResult_t error() const = 0;
  virtual std::string error_text() const = 0;
  // The peer has gone and everything it sent has been seen: whoever still waits for a
  // clear-to-send or a message from it will wait forever.
  virtual bool peer_closed() const = 0;
  virtual std::string peer() const = 0;
};

class Connector {
 public:
  virtual ~Connector() = default;
  // Advances connection setup without blocking; *out stays null until ready.
  virtual ncclResult_t progress(std::unique_ptr<Link>* out) = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Accepts and authenticates inbound connections without blocking; *out stays null until one
  // full link (all its sockets/queues) has arrived. Strangers are rejected and logged.
  virtual ncclResult_t accept(std::unique_ptr<Link>* out) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Per-link settings for the init log line ("2 socket threads x 2 sockets").
  virtual std::string settings() const = 0;
  virtual int num_devices() const = 0;
  virtual const DeviceInfo& device(int dev) const = 0;
  // Fills handle[0, kTransportHandleBytes) for the peer's connect().
  virtual ncclResult_t listen(int dev, void* handle, std::unique_ptr<Listener>* out) = 0;
  // traffic_class: NCCL's per-communicator setting (v10 connect config, v11 init config), -1 for
  // the transport's default.
  virtual ncclResult_t connect(int dev, const void* handle, int traffic_class, std::unique_ptr<Connector>* out) = 0;
};

}  // namespace zipccl
