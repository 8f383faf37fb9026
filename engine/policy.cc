#include "policy.h"

#include "codec_engine.h"
#include "link_meter.h"

namespace zipccl {

double CompressPolicy::link_bps() const { return planning_link_bps(link_bps_, link_); }

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
  // In a collective every rank encodes what it sends and decodes what it receives: the local
  // engine's rate for both at once decides (the receiver's is alike). Unmeasured: compress one
  // message at a time, which measures it.
  const double enc = coding_rate(codec);
  if (enc == 0) {
    if (probing_) return false;
    probing_ = true;
    return true;
  }
  if (codec_keeps_up(enc, link_bps())) return true;
  if (++slow_skipped_ < kSlowProbeEvery) return false;
  slow_skipped_ = 0;
  return true;
}

bool CompressPolicy::inclined(size_t bytes, const CodecEngine& codec) const {
  if (mode_ == ZipMode::kOff || bytes == 0) return false;
  if (mode_ == ZipMode::kAlways) return true;
  if (int64_t(bytes) < min_bytes() || ratio_ > max_ratio()) return false;
  const double enc = coding_rate(codec);
  return enc == 0 || codec_keeps_up(enc, link_bps());
}

void CompressPolicy::record(size_t in, size_t out) {
  probing_ = false;
  if (in == 0) return;
  const double r = double(out) / double(in);
  ratio_ = 0.75 * ratio_ + 0.25 * r;
}

}  // namespace zipccl
