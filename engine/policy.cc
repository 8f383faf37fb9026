#include "policy.h"

#include <algorithm>

#include "codec_engine.h"
#include "link_meter.h"

namespace zipccl {

// A device measured at over twice the speed it reports misreports it (a virtual interface: lo says
// 10 Gb/s): the measure replaces it. Short of that the reported speed stands, since sends complete
// into socket buffers in bursts above the line rate.
double CompressPolicy::link_bps() const {
  const double measured = link_ ? link_->bytes_per_s() : 0;
  return measured > kMisreported * link_bps_ ? measured : link_bps_;
}

bool CompressPolicy::should_compress(size_t bytes, const CodecEngine& codec) {
  if (mode_ == ZipMode::kOff || bytes == 0) return false;
  if (mode_ == ZipMode::kAlways) return true;
  if (int64_t(bytes) < min_bytes()) return false;
  if (ratio_ > max_ratio()) {
    // Incompressible lately: send raw, but look again now and then in case the data changed.
    if (++skipped_ < kProbeEvery) return false;
    skipped_ = 0;
    return true;
  }
  // The sender cannot see the receiver's decoder; decoding is the cheaper half, so the local
  // encoder's throughput decides. Unmeasured: compress one message at a time, which measures it.
  const double enc = codec.throughput(CodecJob::kEncode);
  if (enc == 0) {
    if (probing_) return false;
    probing_ = true;
    return true;
  }
  if (enc > kCodecMargin * link_bps()) return true;
  if (++slow_skipped_ < kSlowProbeEvery) return false;
  slow_skipped_ = 0;
  return true;
}

void CompressPolicy::record(size_t in, size_t out) {
  probing_ = false;
  if (in == 0) return;
  const double r = double(out) / double(in);
  ratio_ = 0.75 * ratio_ + 0.25 * r;
}

}  // namespace zipccl
