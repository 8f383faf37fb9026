// Whether a receive offers its sender staging for compressed bytes (auto mode). An offer costs a
// lease, which keeps the resident GPU codec's kernel on its SMs (and an application's
// cudaDeviceSynchronize waiting for its idle exit), and staging memory; both are spent for nothing
// while the sender declines: its codec does not beat the link, the data does not compress, or its
// messages are too small to pay (a stream of small collectives). After kQuietAfter messages in a
// row arrived raw where staging was offered (kQuietAfterSmall if all were too small to pay: a run
// of small collectives, each of which would otherwise start the kernel and wait for its idle exit
// at the application's next synchronize), only every kProbeEvery-th receive offers (the sender's
// policy only runs on offers), and a probe holds until a receive can make it (its kernel runs); a
// message that arrives compressed makes every receive offer again, and so does one large enough to
// compress arriving (unoffered) if only small ones were declined. A gate quiet over small messages
// only does not probe: that arrival reopens it, and a probe of a small collective would start the
// kernel for a message sent raw (and the application's next synchronize would wait for the kernel's
// idle exit). A cold kernel is worth waiting for (NCCL_ZIP_GPU_WAIT_US) only while the sender
// compresses: since the last large message that arrived compressed, none arrived raw into offered
// staging and the gate has not gone quiet. A new connection starts quiet as if over small messages:
// its first large arrival opens it, and a run of small collectives first (a communicator's set-up,
// a benchmark's small sizes) never starts the kernel. A gate quiet over small messages that a large
// arrival opens expects what it did before them: the first receive after a run of small collectives
// waits for a cold kernel if the sender was compressing (NCCL posts up to 8 receives at once, and
// each that finds the kernel stopped offers nothing).
#pragma once

#include <cstdint>

namespace zipccl {

class OfferGate {
 public:
  static constexpr uint32_t kQuietAfter = 32;
  // A large collective ends with one short message per connection, not several in a row.
  static constexpr uint32_t kQuietAfterSmall = 4;
  static constexpr uint32_t kProbeEvery = 64;

  // Whether the next receive offers (grouped receives share the answer); the same until it is
  // posted, since NCCL calls irecv again when one returns no request.
  bool offer() const { return !quiet_ || probe_due(); }
  // A receive was posted; offered: it did offer staging. A probe that could not stays due.
  void posted(bool offered) {
    if (quiet_ && (offered || !probe_due())) ++posts_;
  }
  // A message arrived; offered: it could have come compressed; large: of a size the sender's
  // policy compresses (compressible(), policy.h: alone or in a stream).
  void arrived(bool offered, bool compressed, bool large) {
    if (compressed) {
      quiet_ = false;
      declined_ = large_declined_ = small_run_ = 0;
      expecting_ = true;
      return;
    }
    if (!offered) {
      // Quiet over small messages only: one the sender may compress asks again, and a sender
      // that compressed the large ones before the small run is expected to again.
      if (quiet_ && large && large_declined_ == 0) {
        quiet_ = false;
        declined_ = 0;
        expecting_ = resume_expecting_;
      }
      return;
    }
    // A collective's last, short message comes raw whatever the sender decides: it alone does
    // not say that the next collective's will.
    if (large) {
      expecting_ = false;
      ++large_declined_;
      small_run_ = 0;
    } else {
      ++small_run_;
    }
    if ((++declined_ >= kQuietAfter || small_run_ >= kQuietAfterSmall) && !quiet_) {
      quiet_ = true;
      resume_expecting_ = expecting_ && large_declined_ == 0;
      expecting_ = false;
      posts_ = 1;  // the first probe kProbeEvery - 1 receives on
    }
  }
  bool quiet() const { return quiet_; }
  bool expecting() const { return expecting_; }

 private:
  bool probe_due() const { return large_declined_ > 0 && posts_ % kProbeEvery == 0; }

  uint32_t declined_ = 0;  // raw arrivals into offered staging since the last compressed one
  uint32_t large_declined_ = 0;  // of them large
  uint32_t small_run_ = 0;       // of them small, since the last large one
  uint32_t posts_ = 1;     // receives posted while quiet
  bool quiet_ = true;
  bool expecting_ = false;  // the last large message into offered staging came compressed
  bool resume_expecting_ = false;  // expecting_ when the gate went quiet over small messages
};

}  // namespace zipccl
