#include "policy.h"

#include <algorithm>

#include "codec_engine.h"
#include "link_backlog.h"
#include "link_meter.h"

namespace zipccl {

double CompressPolicy::link_bps() const { return planning_link_bps(link_bps_, link_); }

CompressPolicy::Verdict CompressPolicy::verdict(size_t bytes, const CodecEngine& codec, double ahead) const {
  if (raw_by_size(bytes)) return Verdict::kNo;
  if (mode_ == ZipMode::kAlways) return Verdict::kYes;
  if (ratio_ > max_ratio()) return Verdict::kIncompressible;
  if (!saves_coding_time(double(bytes), ratio_, link_bps()) && !hides_coding_time(ahead, link_bps()))
    return Verdict::kNo;
  // In a collective every rank encodes what it sends and decodes what it receives: the local
  // engine's rate for both at once decides (the receiver's is alike).
  const double enc = coding_rate(codec);
  if (enc == 0) return Verdict::kUnmeasured;
  if (codec_keeps_up(enc, link_bps(), keeping_up_ ? kCodecKeepMargin : kCodecMargin)) {
    if (backlog_ && codec_queue_idles_link(codec.queued_seconds(), double(backlog_->bytes()) / link_bps(),
                                           double(bytes), ratio_, link_bps()))
      return Verdict::kBusyCodec;
    return Verdict::kYes;
  }
  // A codec found slow on a first sample alone is measured on: one that is not used is not
  // measured again for hundreds of messages (kSlowProbeFirst), which a short job never sends.
  return coding_rate_settled(codec) ? Verdict::kSlowCodec : Verdict::kUnmeasured;
}

bool CompressPolicy::raw_by_size(size_t bytes) const {
  return mode_ == ZipMode::kOff || bytes == 0 || (mode_ == ZipMode::kAuto && int64_t(bytes) < min_bytes());
}

RawWhy CompressPolicy::raw_why(Verdict v) const {
  if (v == Verdict::kNo) return mode_ == ZipMode::kOff ? RawWhy::kDeclined : RawWhy::kSmall;
  // A busy codec says nothing of the data nor of the codec's rate: the receiver goes on offering
  // and waiting for a cold kernel (offer_gate.h) as for a message that found the kernel stopped.
  return v == Verdict::kIncompressible || v == Verdict::kSlowCodec ? RawWhy::kDeclined : RawWhy::kWanted;
}

bool CompressPolicy::should_compress(size_t bytes, const CodecEngine& codec, double ahead, RawWhy* why) {
  const Verdict v = verdict(bytes, codec, ahead);
  const bool yes = decide(v);
  if (why && !yes) *why = raw_why(v);
  if (!yes && mode_ == ZipMode::kAuto) ++declined_[int(v)];
  return yes;
}

std::string CompressPolicy::declines() const {
  static const char* const kWhy[kVerdicts] = {"small for the link", "", "incompressible", "unmeasured codec",
                                              "slow codec", "busy codec"};
  uint64_t all = 0;
  std::string parts;
  for (int v = 0; v < kVerdicts; ++v) {
    if (declined_[v] == 0) continue;
    all += declined_[v];
    parts += (parts.empty() ? "" : ", ") + std::string(kWhy[v]) + " " + std::to_string(declined_[v]);
  }
  return all ? "declined " + std::to_string(all) + " (" + parts + ")" : "";
}

bool CompressPolicy::decide(Verdict v) {
  switch (v) {
    case Verdict::kNo:
    case Verdict::kBusyCodec:
      return false;
    case Verdict::kYes:
      slow_every_ = kSlowProbeFirst;
      keeping_up_ = true;
      return true;
    case Verdict::kIncompressible:
      // Send raw, but look again now and then in case the data changed.
      if (++skipped_ < kProbeEvery) return false;
      skipped_ = 0;
      return true;
    case Verdict::kUnmeasured:
      // Compress one message at a time, which measures the codec.
      if (probing_) return false;
      probing_ = true;
      return true;
    case Verdict::kSlowCodec:
      keeping_up_ = false;
      if (++slow_skipped_ < slow_every_) return false;
      slow_skipped_ = 0;
      slow_every_ = std::min(2 * slow_every_, kSlowProbeMax);
      return true;
  }
  return false;
}

bool CompressPolicy::would_compress(size_t bytes, const CodecEngine& codec, double ahead) const {
  CompressPolicy asked = *this;
  return asked.decide(verdict(bytes, codec, ahead));
}

bool CompressPolicy::unoffered(size_t bytes, const CodecEngine& codec, double ahead, RawWhy* why) {
  const Verdict v = verdict(bytes, codec, ahead);
  const bool would = CompressPolicy(*this).decide(v);
  if (why) *why = would ? RawWhy::kWanted : raw_why(v);
  switch (v) {
    case Verdict::kIncompressible:
      skipped_ = std::min(skipped_ + 1, kProbeEvery - 1);
      break;
    case Verdict::kSlowCodec:
      slow_skipped_ = std::min(slow_skipped_ + 1, slow_every_ - 1);
      break;
    default:
      break;
  }
  return would;
}

void CompressPolicy::record(size_t in, size_t out) {
  probing_ = false;
  if (in == 0) return;
  const double r = double(out) / double(in);
  ratio_ = 0.75 * ratio_ + 0.25 * r;
}

}  // namespace zipccl
