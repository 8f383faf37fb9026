// Whether a receive offers its sender staging for compressed bytes (auto mode). An offer costs a
// lease, which keeps the resident GPU codec's kernel on its SMs (and an application's
// cudaDeviceSynchronize waiting for its idle exit), and staging memory; both are spent for nothing
// while the sender declines. Each raw message says why it came raw (RawWhy, the sender's policy's
// word), and the gate follows that: after kQuietAfter messages in a row arrived raw into offered
// staging, declined (kQuietAfterSmall if all were too small to pay: a run of small collectives,
// each of which would otherwise start the kernel and hold the application's next synchronize until
// its idle exit), only every kProbeEvery-th receive offers (the sender's policy only runs on
// offers), and a probe holds until a receive can make it (its kernel runs). A gate quiet over small
// messages only does not probe: a message its sender would have compressed (kWanted), arriving
// unoffered, opens it again. A message that arrives compressed makes every receive offer again. One
// the sender would have compressed but for its kernel not running is no decline, unless
// kQuietAfterCold come without a compressed one (a kernel that does not start). A cold kernel is
// worth waiting for (NCCL_ZIP_GPU_WAIT_US) only while the sender compresses or would (since the
// last message that arrived compressed, or unoffered that its sender would have compressed, none
// was declined but for its size, and the gate has not gone quiet), and for a probe. NCCL posts up
// to 8 receives at once, and each that finds the kernel stopped offers nothing: a collective of a
// few messages per connection, each call starting with the kernel stopped (after an
// application's synchronize), would otherwise never come compressed, nor a quiet gate's probe be
// made. A new connection starts quiet as if over small messages:
// the first message its sender would compress opens it, and a run of small collectives first (a
// communicator's set-up, a benchmark's small sizes) never starts the kernel.
#pragma once

#include <cstdint>

#include "transport.h"

namespace zipccl {

class OfferGate {
 public:
  static constexpr uint32_t kQuietAfter = 32;
  // A large collective ends with one short message per connection, not several in a row.
  static constexpr uint32_t kQuietAfterSmall = 4;
  // Raw arrivals into offered staging that the sender wanted to compress (its kernel was not
  // running) since the last compressed one: a kernel starts within a few messages, so this many
  // mean one that does not (its launcher held in a CUDA call), for which the offers keep this
  // side's kernel resident in vain.
  static constexpr uint32_t kQuietAfterCold = 256;
  static constexpr uint32_t kProbeEvery = 64;

  // Whether the next receive offers (grouped receives share the answer); the same until it is
  // posted, since NCCL calls irecv again when one returns no request.
  bool offer() const { return !quiet_ || probe_due(); }
  // A receive was posted; offered: it did offer staging. A probe that could not stays due.
  void posted(bool offered) {
    if (quiet_ && offered && probe_due()) probe_out_ = true;
    if (quiet_ && (offered || !probe_due())) ++posts_;
  }
  // A message arrived; offered: it could have come compressed; why: what its sender said of it if
  // it came raw (RawWhy).
  void arrived(bool offered, bool compressed, RawWhy why) {
    const bool probe_answer = offered && probe_out_;
    if (offered) probe_out_ = false;  // answered
    if (probe_answer && why != RawWhy::kSmall && why != RawWhy::kWanted) blank_probes_ = 0;
    if (compressed) {
      quiet_ = false;
      declined_ = large_declined_ = small_run_ = cold_run_ = 0;
      expecting_ = true;
      return;
    }
    if (why == RawWhy::kWanted) {
      // The sender would have compressed it (no staging offered, its kernel not running or busy):
      // no decline, unless its kernel stays stopped, and no run of small collectives. A gate
      // quiet over small messages only asks again. Unoffered, it says the sender compresses.
      small_run_ = 0;
      if (probe_answer) probe_again();
      if (!offered) {
        if (quiet_ && large_declined_ == 0) {
          quiet_ = false;
          declined_ = 0;
        }
        expecting_ = !quiet_;
        return;
      }
      if (++cold_run_ < kQuietAfterCold) return;
      // A kernel that does not start: the sender compresses nothing, as after declines.
      cold_run_ = 0;
      expecting_ = false;
      ++large_declined_;
      go_quiet();
      return;
    }
    if (!offered) return;
    // A collective's last, short message comes raw whatever the sender decides: it alone does
    // not say that the next collective's will.
    if (why == RawWhy::kSmall) {
      ++small_run_;
      if (probe_answer) probe_again();
    } else {
      expecting_ = false;
      ++large_declined_;
      small_run_ = 0;
    }
    if (++declined_ >= kQuietAfter || small_run_ >= kQuietAfterSmall) go_quiet();
  }
  // An offered receive's message was pushed before its sender saw the offer (it pushed into
  // receives that never take compressed bytes, and ran ahead): a probe it was is made again once
  // the sender follows the receives' records (followed(): a message that was not pushed).
  void unseen() { reprobe_ = quiet_ && probe_out_; }
  void followed() {
    if (reprobe_ && quiet_ && probe_out_) posts_ -= posts_ % kProbeEvery;
    reprobe_ = false;
  }
  bool quiet() const { return quiet_; }
  // Whether the sender of the next receive need not see it (it may push past it): quiet, and the
  // receive neither offers nor probes (no probe due, none its sender pushed past waiting to be
  // made again: the sender must follow the receives' records for that).
  bool pushable() const { return quiet_ && !probe_due() && !reprobe_; }
  // And how many placements past it: any (kPushAny) where no probe is to come (a new connection's
  // gate, or one quiet over small messages only: quiet until a message its sender would have
  // compressed arrives), else at most kPushAhead and never as far as the next probe's (counting a
  // placement per receive, the fewest), so that the sender sees the probe's offer.
  static constexpr uint32_t kPushAhead = 8;  // NCCL's receives in flight on a connection
  uint32_t push_ahead() const {
    if (large_declined_ == 0) return kPushAny;
    const uint32_t before_probe = kProbeEvery - 1 - posts_ % kProbeEvery;  // receives after this one
    return before_probe < kPushAhead ? before_probe : kPushAhead;
  }
  bool expecting() const { return expecting_; }
  // The next receive is a quiet gate's probe: like an expected one, worth a cold kernel's wait
  // (a probe that offers nothing shares its batch's fate, and each batch may find the kernel
  // stopped: the probe would never be made).
  bool probing() const { return quiet_ && probe_due(); }

 private:
  bool probe_due() const { return large_declined_ > 0 && posts_ % kProbeEvery == 0; }
  // A probe answered by a message that says nothing of the data (too small to code, or its
  // sender's kernel was not running: it starts now) is made again by the next receive, up to
  // kQuietAfterSmall such answers in a row (a run of small collectives, a kernel that does not
  // start), then the next kProbeEvery on. Otherwise a probe that keeps landing on short messages (a
  // collective's last one, where each call posts a number of receives that divides kProbeEvery)
  // would leave the gate quiet for good, and one that met a cold kernel would lose a period.
  void probe_again() {
    if (quiet_ && ++blank_probes_ < kQuietAfterSmall) posts_ -= posts_ % kProbeEvery;
  }
  void go_quiet() {
    if (quiet_) return;
    quiet_ = true;
    expecting_ = false;
    probe_out_ = reprobe_ = false;
    blank_probes_ = 0;
    posts_ = 1;  // the first probe kProbeEvery - 1 receives on
  }

  uint32_t declined_ = 0;  // declined arrivals into offered staging since the last compressed one
  uint32_t large_declined_ = 0;  // of them declined but for their size (kDeclined)
  uint32_t small_run_ = 0;       // of them too small (kSmall), since the last larger arrival
  uint32_t cold_run_ = 0;  // wanted arrivals into offered staging since the last compressed one
  uint32_t posts_ = 1;     // receives posted while quiet
  uint32_t blank_probes_ = 0;  // probes in a row answered by a message that said nothing of the data
  bool quiet_ = true;
  bool probe_out_ = false;  // a probe was posted, and no arrival into offered staging answered it
  bool reprobe_ = false;    // ... its message was pushed: probe again once the sender follows
  bool expecting_ = false;  // nothing declined but for its size since the last compressed or wanted arrival
};

}  // namespace zipccl
