// Whether a call that found the resident kernel stopped waits for it to start (returns no
// request; NCCL calls again) rather than send its message raw. A wait lasts NCCL_ZIP_GPU_WAIT_US
// from the first miss. One that runs out is in vain: a launcher stuck in a CUDA call, or a start
// slower than the wait (under MPS, beside other kernels, now and then). After it no call waits
// for a while, so a stuck launcher costs a comm one wait in that while, not one per message; the
// while starts short, since a slow start is over by the next collective and a longer pause would
// send that collective's first messages raw (at 64 MiB a tenth of the bytes), and doubles with
// each wait in vain up to 100 ms; a wait that the kernel's start ends in time sets it back. (A
// kernel found running between waits does not: where every start is slower than the wait, the
// kernel runs through each collective, and each would pay a wait in vain.)
#pragma once

#include <cstdint>

namespace zipccl {

class ColdWait {
 public:
  static constexpr int64_t kMinPauseNs = 1000 * 1000;
  static constexpr int64_t kMaxPauseNs = 100 * 1000 * 1000;

  explicit ColdWait(int64_t wait_ns) : wait_ns_(wait_ns) {}
  // running: the kernel runs (a lease was granted). True while the caller should wait.
  bool wait(bool running, int64_t now_ns);
  uint64_t waits() const { return waits_; }  // waits begun
  uint64_t vain() const { return vain_; }    // of them, those that ran out

 private:
  int64_t wait_ns_;
  bool cold_ = false;
  int64_t cold_since_ns_ = 0;  // the first call that found the kernel stopped, while cold_
  int64_t no_wait_until_ns_ = 0;
  int64_t pause_ns_ = kMinPauseNs;  // after the next wait in vain
  uint64_t waits_ = 0, vain_ = 0;
};

}  // namespace zipccl
