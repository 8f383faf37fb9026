// Per-connection decision: compress this message or send it raw. Compression pays when the codec
// keeps up with the link (then the wire carries ratio x the bytes) and the data has recently
// compressed below NCCL_ZIP_MAX_RATIO. Both rates are what each moves while busy: the codec's for
// encoding and decoding at once (coding_rate(), codec_engine.h), the link's from its messages'
// spans (link_meter.h, where that is far above the speed the device reports; NCCL_ZIP_LINK_MBPS
// fixes it instead).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine_params.h"
#include "transport.h"

namespace zipccl {

class CodecEngine;
class LinkBacklog;
class LinkMeter;

// Auto mode compresses only where the encoder beats the link by this factor; the tuner steers
// NCCL to compressible protocols by the same rule, so the two agree.
constexpr double kCodecMargin = 1.2;
inline bool codec_keeps_up(double codec_bps, double link_bps, double margin = kCodecMargin) {
  return codec_bps > margin * link_bps;
}
// Once compressing, a connection goes on while the codec beats the link at all: the GPU codec's
// measured rate moves with the load on the GPU and its PCIe link, and the resident kernel's CTAs
// are sized to the margin (resident_gpus.cc), so a connection that stopped at every dip under it
// spent most messages backing off its probes (a 4 GB/s paced link on one H200, two ranks: auto
// compressed 12% of the messages, forced 78%, and forced ran 1.25-1.47x).
constexpr double kCodecKeepMargin = 1.0;
// What a compressed message costs beyond the codec's throughput: one encode's and one decode's
// turnaround (doorbell to result on the resident codec, 14-22 us for one 128-512 KiB job on an
// H200, docs/benchmarks.md). A channel with one message in flight (a small collective) waits for
// both, so auto mode compresses only messages whose wire time saved is at least this.
constexpr double kMessageCodecSeconds = 20e-6;
inline bool saves_coding_time(double bytes, double ratio, double link_bps) {
  return bytes * (1 - ratio) >= kMessageCodecSeconds * link_bps;
}
// Messages of the same connection still ahead of this one on the link hide its coding: its
// encode runs while they drain and its decode while the next arrives. Two turnarounds' worth of
// wire time ahead lets auto mode code a message too small to pay alone (NCCL's point-to-point
// chunks are 128 KiB: alone they save 7.9 us at 5 GB/s, and in a stream of sends a third of
// their wire time).
inline bool hides_coding_time(double ahead_bytes, double link_bps) {
  return ahead_bytes >= 2 * kMessageCodecSeconds * link_bps;
}
// The ratio auto mode assumes until a connection has measured its own (bf16 codes to ~0.70).
constexpr double kAssumedRatio = 0.7;
// A message waits for the jobs the codec already has (queued_s) while the link has link_s of
// bytes to move before it: past that the link would stand idle for the rest of the wait. Coding
// pays while that idle is no more than the wire time it saves; beyond, the message goes raw at
// once and the link carries it while the codec catches up. Where the codec codes a little faster
// than the link moves raw bytes but slower than it moves compressed ones, every message coded left
// the link waiting and the collective ran at the codec's rate (a 4 GB/s link, 8 CTAs coding 4.8
// GB/s each way at once: 64 MiB all_gather 1.06x of raw with 97% of its messages compressed);
// a mix of raw and coded keeps both busy.
inline bool codec_queue_idles_link(double queued_s, double link_s, double bytes, double ratio, double link_bps) {
  return queued_s - link_s > bytes * (1 - ratio) / link_bps;
}

class CompressPolicy {
 public:
  // link: the measured rate of the link, or null to take link_bytes_per_s as it is. backlog: what
  // the device's link has yet to move (codec_queue_idles_link), or null where that is not weighed.
  CompressPolicy(ZipMode mode, double link_bytes_per_s, const LinkMeter* link = nullptr,
                 const LinkBacklog* backlog = nullptr)
      : mode_(mode), link_bps_(link_bytes_per_s), link_(link), backlog_(backlog) {}

  // Only asked for messages the receiver allows to arrive compressed. ahead: wire bytes of this
  // connection's earlier messages not yet through the link. why (where given): on a no, what the
  // sender tells the receiver of the raw message (a probe of the codec still measuring: kWanted).
  bool should_compress(size_t bytes, const CodecEngine& codec, double ahead = 0, RawWhy* why = nullptr);
  // What should_compress would answer now, its probes included, without changing anything: a
  // cold GPU codec is worth waiting for exactly then (a probe that finds it stopped measures
  // nothing, and while a receiver is quiet its probes are rare).
  bool would_compress(size_t bytes, const CodecEngine& codec, double ahead = 0) const;
  // Raw whatever the link, the codec and the data: compression off, or in auto mode below
  // NCCL_ZIP_MIN_BYTES (such a message may go before its clear-to-send, Link::post_eager).
  bool raw_by_size(size_t bytes) const;
  // A message sent raw because its receive offered no staging (a quiet receiver, OfferGate): it
  // counts toward the probes, so that the receiver's rare probe finds one due. Returns what
  // should_compress would have answered before it counted; why: kWanted where it would have said
  // yes, else as there.
  bool unoffered(size_t bytes, const CodecEngine& codec, double ahead = 0, RawWhy* why = nullptr);
  // Outcome of a compression attempt: in bytes became out bytes (out = in when it did not pay).
  // Called for every attempt, in completion order.
  void record(size_t in, size_t out);
  // An attempt that coded nothing (the resident GPU codec was not running: sent raw). It
  // measured neither the codec nor the data, so the next message tries again (the attempt asked
  // the kernel to start).
  void unmeasured() {
    probing_ = false;
    skipped_ = kProbeEvery - 1;
    slow_skipped_ = slow_every_ - 1;
  }
  // The ratio this connection's data has recently coded to (kAssumedRatio before any).
  double ratio() const { return ratio_; }
  // Why auto mode sent raw what it was offered, for the connection's summary: e.g. "declined 40
  // (small 30, slow codec 10)"; empty when it declined nothing.
  std::string declines() const;

 private:
  static constexpr uint32_t kProbeEvery = 16;  // retry incompressible data every Nth message
  // Measure a codec that was slower than the link again after N messages: one measurement can
  // be a cold or a crowded one (a GPU codec's rate depends on what else the GPU runs), and a
  // codec that is not used is never measured again. N doubles with each such probe, up to
  // kSlowProbeMax, and starts over once the codec keeps up: where the codec is slow a probe is
  // slow too (unpaced loopback on one H200 with two ranks: ~0.9 ms to encode and ~1.4 ms to
  // decode a 750 KB message from host memory), and one slow message holds up its ring step, so
  // one probe in 256 messages cost an all_gather there over half its speed.
  static constexpr uint32_t kSlowProbeFirst = 256;
  static constexpr uint32_t kSlowProbeMax = 1 << 16;

  // What a message meets before the probes: never, yes, or one of the cases that probe; or a
  // codec fast enough but busy (codec_queue_idles_link): raw this once.
  enum class Verdict { kNo, kYes, kIncompressible, kUnmeasured, kSlowCodec, kBusyCodec };
  static constexpr int kVerdicts = int(Verdict::kBusyCodec) + 1;
  Verdict verdict(size_t bytes, const CodecEngine& codec, double ahead) const;
  RawWhy raw_why(Verdict v) const;  // what a no on verdict v tells the receiver
  bool decide(Verdict v);  // should_compress's answer, probes counted
  double link_bps() const;

  ZipMode mode_;
  double link_bps_;
  const LinkMeter* link_;
  const LinkBacklog* backlog_;
  double ratio_ = kAssumedRatio;  // optimistic start: the first messages measure it
  uint32_t skipped_ = 0;
  uint32_t slow_skipped_ = 0;
  uint32_t slow_every_ = kSlowProbeFirst;
  bool probing_ = false;  // a compression is measuring the codec: the next ones wait for it
  bool keeping_up_ = false;  // the last verdict on the codec's rate was kYes: kCodecKeepMargin
  uint64_t declined_[kVerdicts] = {};  // by Verdict: offered messages should_compress sent raw
};

}  // namespace zipccl
