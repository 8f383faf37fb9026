// libFuzzer target: the socket transport's control path (socket/socket_link.cc) as a hostile peer
// drives it. The input is what the peer writes: byte 0 picks the side under test, then a control
// stream and a payload stream (the first two bytes after it split them). A receiving link has
// posted one clear-to-send (one placement of kCapacity bytes, compressed bytes allowed into
// kStaging; with bit 1 of byte 0, raw only, its sender told to push); a sending link waits for
// clear-to-sends and sends each placement it takes min(capacity, kSend) bytes, and one message at
// once on a push. The peer writes its control stream in two halves, the second after 100 of the
// link's progress calls, and closes its end after its bytes, so every run ends. Beyond
// "no crash, no hang" (ASan/UBSan, the link's stall deadline), it checks the link's promises: an
// arrival names the posted placement, is no larger than its capacity (or staging, compressed), and
// lands inside the receive buffers; a clear-to-send the sender takes has 1..kMaxRecvs placements and
// comes in turn, a push (none) where the last ended, again (same first) only to move its bound on
// or lift it; an error stays.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "checks.h"
#include "socket_link.h"

namespace {

using fuzz::guard_intact;
using fuzz::kGuard;
using fuzz::kGuardByte;
using fuzz::require;

constexpr size_t kCapacity = 4096, kStaging = 8192, kSend = 2048;
constexpr int kRounds = 400;  // progress calls
constexpr int kSecondHalf = 100;  // ... after which the peer writes the rest of its control stream

void write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;  // the link closed its end first
    p += w;
    n -= size_t(w);
  }
}

// The peer's control stream, written in two halves (a record, or an inline message's bytes, may
// straddle them), then its end shut.
struct PeerControl {
  int fd;
  const uint8_t* rest;
  size_t n;
  void finish() {
    write_all(fd, rest, n);
    n = 0;
    shutdown(fd, SHUT_WR);
  }
};

// What the link's helper threads may write into or read from until the link is gone.
struct Buffers {
  std::vector<uint8_t> target = std::vector<uint8_t>(kCapacity + kGuard, kGuardByte);
  std::vector<uint8_t> staging = std::vector<uint8_t>(kStaging + kGuard, kGuardByte);
  std::vector<uint8_t> data = std::vector<uint8_t>(kSend, 0x3C);
  std::vector<std::unique_ptr<zipccl::Xfer>> xfers;
};

void receiver(zipccl::tcp::SocketLink& link, Buffers& b, bool raw_only, PeerControl& peer) {
  using namespace zipccl;
  std::vector<uint8_t>& target = b.target;
  std::vector<uint8_t>& staging = b.staging;
  ClearToSend cts;
  cts.seq = 0;
  cts.n = 1;
  cts.p[0].tag = 7;
  cts.p[0].capacity = kCapacity;
  cts.p[0].staging_bytes = raw_only ? 0 : kStaging;
  cts.pushable = raw_only;
  cts.p[0].target = reinterpret_cast<uintptr_t>(target.data());
  cts.p[0].staging = reinterpret_cast<uintptr_t>(staging.data());
  if (link.post_cts(cts) != ncclSuccess) return;
  for (int i = 0; i < kRounds; ++i) {
    if (i == kSecondHalf) peer.finish();
    const ncclResult_t e = link.progress();
    MessageHeader h;
    bool got = false;
    const ncclResult_t a = e == ncclSuccess ? link.poll_arrival(&h, &got) : e;
    if (a != ncclSuccess) {
      require(link.error() != ncclSuccess, "an error that does not stay");
      break;
    }
    if (got) {
      require(h.seq == 0 && h.sub == 0, "an arrival for no posted placement");
      require(h.wire_bytes <= (h.compressed ? kStaging : kCapacity), "an arrival larger than its placement");
      require(!h.compressed || h.why == zipccl::RawWhy::kUnsaid, "a compressed arrival that says why it is raw");
      break;
    }
  }
}

void sender(zipccl::tcp::SocketLink& link, Buffers& b, PeerControl& peer) {
  using namespace zipccl;
  std::vector<uint8_t>& data = b.data;
  std::vector<std::unique_ptr<Xfer>>& xfers = b.xfers;
  uint32_t seq = 0, first = 0;  // what the next clear-to-send must at least say
  bool pushing = false, bounded = false;
  uint32_t push_first = 0, until = 0;
  for (int i = 0; i < kRounds; ++i) {
    if (i == kSecondHalf) peer.finish();
    ClearToSend cts;
    bool got = false;
    ncclResult_t e = link.progress();
    if (e == ncclSuccess) e = link.poll_cts(&cts, &got);
    if (e == ncclSuccess && got && cts.n == 0) {
      // A push: said where the last clear-to-send ended (the next message goes at once, if its
      // bound allows), then again only to move its bound on or lift it.
      const bool again = pushing && bounded && cts.first == push_first &&
                         (!cts.push_bounded || int32_t(cts.push_until - until) > 0);
      require(again || (!pushing && cts.first == first), "a push out of turn");
      if (!again && (!cts.push_bounded || int32_t(cts.push_until - first) > 0)) {
        xfers.push_back(std::make_unique<Xfer>());
        e = link.post_eager(first, 7, data.data(), kSend, RawWhy::kDeclined, true, xfers.back().get());
      }
      pushing = true;
      bounded = cts.push_bounded;
      push_first = cts.first;
      until = cts.push_until;
    } else if (e == ncclSuccess && got) {
      require(cts.n <= kMaxRecvs, "a clear-to-send of too many placements taken");
      // After a push, receives that sent no record took numbers: later ones may come, never earlier.
      const bool in_turn = pushing ? int32_t(cts.seq - seq) >= 0 && int32_t(cts.first - first) >= 0
                                   : cts.seq == seq && cts.first == first;
      require(in_turn, "clear-to-sends out of order");
      pushing = false;
      seq = cts.seq + 1;
      first = cts.first + cts.n;
      for (uint32_t s = 0; s < cts.n && e == ncclSuccess; ++s) {
        MessageHeader h;
        h.seq = cts.seq;
        h.sub = s;
        h.wire_bytes = std::min<uint64_t>(cts.p[s].capacity, kSend);
        xfers.push_back(std::make_unique<Xfer>());
        e = link.post_message(h, cts.p[s], data.data(), xfers.back().get());
      }
    }
    if (e != ncclSuccess) {
      require(link.error() != ncclSuccess, "an error that does not stay");
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const bool as_receiver = (data[0] & 1) == 0;
  const bool push = (data[0] & 2) != 0;  // a receiver's raw receives let the sender push
  const size_t ctrl = std::min(size - 3, size_t(data[1]) | size_t(data[2]) << 8);
  const uint8_t* body = data + 3;
  int c[2], d[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, c) != 0) return 0;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, d) != 0) {
    close(c[0]);
    close(c[1]);
    return 0;
  }
  Buffers b;
  {
    // stall_ms 50: a peer that stops mid-record fails the link quickly instead of never.
    zipccl::tcp::SocketLink link({c[0], d[0]}, "fuzz peer", nullptr, 50, zipccl::tcp::InlineRule(zipccl::tcp::kMaxInline), 0, push);
    PeerControl peer{c[1], body + ctrl / 2, ctrl - ctrl / 2};
    write_all(c[1], body, ctrl / 2);
    write_all(d[1], body + ctrl, size - 3 - ctrl);
    shutdown(d[1], SHUT_WR);
    if (as_receiver)
      receiver(link, b, push, peer);
    else
      sender(link, b, peer);
  }  // the link closes c[0] and d[0] and joins its helper threads: nothing writes b any more
  require(guard_intact(b.target, kCapacity) && guard_intact(b.staging, kStaging), "bytes written past a receive buffer");
  close(c[1]);
  close(d[1]);
  return 0;
}
