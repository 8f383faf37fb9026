// How a receiving link puts a message's parts back together. A message is split over the
// connection's QPs (ib_wire.h split()): its first part on QP 0, part q on QP q, each ending in a
// write with the message's immediate. QP 0 delivers first parts in message order and each QP its
// own parts in message order, but the QPs are not ordered against each other: a part may come
// before its message's first. What comes is untrusted: a part whose immediate disagrees with its
// message's, or more parts waiting on a QP than messages that can still come, is the peer's
// protocol error (and memory stays bounded however the peer behaves).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

#include "ib_params.h"
#include "transport.h"

namespace zipccl::verbs {

class PartMatcher {
 public:
  // Message h's first part: `parts` parts in all (1..kMaxQpsPerConn), the others tagged imm.
  // Null, or why the peer broke the protocol.
  const char* first(const MessageHeader& h, uint32_t imm, uint32_t parts);
  // A part on QP q (1..kMaxQpsPerConn-1). may_come: messages whose first part can still come
  // (their placements are posted and not yet filled). Null, or why the peer broke the protocol.
  const char* part(uint32_t q, uint32_t imm, size_t may_come);
  // The next message with all its parts in, in message order.
  bool pop(MessageHeader* h);
  // No message waits for a part.
  bool idle() const { return incoming_.empty(); }

 private:
  struct Incoming {
    MessageHeader h;
    uint32_t imm;
    uint32_t parts;
    uint32_t seen;  // bit q: part q is in (QP 0's included)
  };
  const char* match();

  std::deque<Incoming> incoming_;
  std::deque<uint32_t> early_[kMaxQpsPerConn];  // immediates on QPs 1.. before their message's first
};

}  // namespace zipccl::verbs
