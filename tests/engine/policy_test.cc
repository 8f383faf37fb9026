// CompressPolicy: when a message is worth compressing, from the mode, its size, the codec's
// measured throughput against the link's, and the ratio recently achieved.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "codec_engine.h"
#include "link_backlog.h"
#include "link_meter.h"
#include "policy.h"

namespace zipccl {
namespace {

// Encodes at enc, decodes at dec (0: no decode measured yet); settled: the rates rest on whole
// windows, not on a first sample alone.
class FakeEngine : public CodecEngine {
 public:
  explicit FakeEngine(double enc, double dec = 0, bool settled = true) : enc_(enc), dec_(dec), settled_(settled) {}
  const char* name() const override { return "fake"; }
  void submit(CodecJob*) override {}
  void poll() override {}
  double throughput(CodecJob::Op op) const override { return op == CodecJob::kEncode ? enc_ : dec_; }
  bool throughput_settled(CodecJob::Op) const override { return settled_; }
  double queued_seconds() const override { return queued_s_; }
  void settle() { settled_ = true; }
  void queue(double seconds) { queued_s_ = seconds; }

 private:
  double enc_, dec_;
  bool settled_;
  double queued_s_ = 0;
};

constexpr double kLink = 1.25e9;     // 10 Gb/s
constexpr size_t kBig = 1 << 20;     // above NCCL_ZIP_MIN_BYTES (64 KiB by default)

TEST(CompressPolicy, OffNeverAlwaysAlways) {
  FakeEngine slow(1.0);
  CompressPolicy off(ZipMode::kOff, kLink), always(ZipMode::kAlways, kLink);
  EXPECT_FALSE(off.should_compress(kBig, slow));
  EXPECT_TRUE(always.should_compress(kBig, slow)) << "forced, however slow the codec";
  EXPECT_TRUE(always.should_compress(1, slow)) << "forced, however small the message";
  EXPECT_FALSE(always.should_compress(0, slow)) << "an empty message has nothing to compress";
}

TEST(CompressPolicy, AutoWhenTheCodecOutrunsTheLink) {
  FakeEngine fast(10 * kLink), slow(kLink);
  CompressPolicy p(ZipMode::kAuto, kLink);
  EXPECT_TRUE(p.should_compress(kBig, fast));
  EXPECT_FALSE(p.should_compress(kBig, slow)) << "the codec must beat the link by a margin";
  EXPECT_FALSE(p.should_compress(1000, fast)) << "below NCCL_ZIP_MIN_BYTES";
}

// A message must save at least the codec's turnaround on the wire (kMessageCodecSeconds): at
// ratio 0.7 on a 5 GB/s link that is 333 KB, on a 1.25 GB/s one 83 KB.
TEST(CompressPolicy, AMessageMustSaveMoreWireTimeThanItsCodingTakes) {
  const double link = 5e9;
  FakeEngine fast(10 * link);
  CompressPolicy p(ZipMode::kAuto, link), slow_link(ZipMode::kAuto, 1.25e9);
  EXPECT_FALSE(p.should_compress(256 << 10, fast)) << "saves 15.7 us";
  EXPECT_TRUE(p.should_compress(512 << 10, fast)) << "saves 31.5 us";
  EXPECT_TRUE(slow_link.should_compress(256 << 10, fast)) << "saves 63 us";
  EXPECT_FALSE(slow_link.should_compress(64 << 10, fast)) << "saves 15.7 us";
  EXPECT_FALSE(p.would_compress(256 << 10, fast)) << "no cold kernel is worth waiting for either";
}

// Behind messages of the same connection still on the link a message's coding is hidden once
// they take two turnarounds (40 us) to drain: NCCL's 128 KiB point-to-point chunks in a stream
// on a 5 GB/s link, 200 KB ahead.
TEST(CompressPolicy, MessagesAheadHideTheCoding) {
  const double link = 5e9;
  FakeEngine fast(10 * link), slow(link);
  CompressPolicy p(ZipMode::kAuto, link);
  EXPECT_FALSE(p.should_compress(128 << 10, fast)) << "alone: saves 7.9 us";
  EXPECT_FALSE(p.should_compress(128 << 10, fast, 199000)) << "39.8 us ahead";
  EXPECT_TRUE(p.should_compress(128 << 10, fast, 201000)) << "40.2 us ahead";
  EXPECT_TRUE(p.would_compress(128 << 10, fast, 201000)) << "worth a cold kernel's wait as well";
  EXPECT_FALSE(p.should_compress(128 << 10, slow, 1 << 30)) << "a codec slower than the link still is";
  EXPECT_FALSE(p.should_compress(1000, fast, 1 << 30)) << "below NCCL_ZIP_MIN_BYTES";
}

// What the sender tells the receiver of a message it sends raw (RawWhy): too small to pay, declined
// for the data or the codec, or wanted (it would compress but the codec has not been measured).
TEST(CompressPolicy, ARawMessageSaysWhy) {
  FakeEngine fast(10 * kLink), slow(kLink), unmeasured(0);
  CompressPolicy p(ZipMode::kAuto, kLink);
  RawWhy why = RawWhy::kUnsaid;
  EXPECT_FALSE(p.should_compress(1000, fast, 0, &why));
  EXPECT_EQ(why, RawWhy::kSmall) << "below NCCL_ZIP_MIN_BYTES";
  EXPECT_FALSE(p.should_compress(64 << 10, fast, 0, &why));
  EXPECT_EQ(why, RawWhy::kSmall) << "saves 15.7 us of a 1.25 GB/s link";
  EXPECT_FALSE(p.should_compress(kBig, slow, 0, &why));
  EXPECT_EQ(why, RawWhy::kDeclined) << "a codec no faster than the link";
  EXPECT_TRUE(p.should_compress(kBig, unmeasured, 0, &why)) << "the first probe measures it";
  EXPECT_FALSE(p.should_compress(kBig, unmeasured, 0, &why));
  EXPECT_EQ(why, RawWhy::kWanted) << "the probe is still measuring";
  EXPECT_FALSE(p.unoffered(1000, fast, 0, &why));
  EXPECT_EQ(why, RawWhy::kSmall);
  CompressPolicy q(ZipMode::kAuto, kLink);
  EXPECT_TRUE(q.unoffered(kBig, fast, 0, &why));
  EXPECT_EQ(why, RawWhy::kWanted) << "unoffered, it would have gone compressed";
  for (int i = 0; i < 7; ++i) q.record(kBig, kBig);  // the measured ratio passes NCCL_ZIP_MAX_RATIO
  EXPECT_FALSE(q.should_compress(kBig, fast, 0, &why));
  EXPECT_EQ(why, RawWhy::kDeclined) << "incompressible";
  CompressPolicy off(ZipMode::kOff, kLink);
  EXPECT_FALSE(off.should_compress(kBig, fast, 0, &why));
  EXPECT_EQ(why, RawWhy::kDeclined) << "compression off";
}

// The boundary of a message that pays alone: 20 us of a 5 GB/s link saved at ratio 0.7.
TEST(CompressPolicy, CompressibleFollowsTheLink) {
  FakeEngine fast(1e12);
  CompressPolicy p(ZipMode::kAuto, 5e9);
  EXPECT_FALSE(p.should_compress(333333 - 64, fast));
  EXPECT_TRUE(p.should_compress(333333 + 64, fast));
}

// A rank encodes what it sends and decodes what it receives at once: both must outrun the link.
TEST(CompressPolicy, EncodeAndDecodeTogetherMustOutrunTheLink) {
  CompressPolicy p(ZipMode::kAuto, kLink);
  EXPECT_TRUE(p.should_compress(kBig, FakeEngine(3 * kLink, 3 * kLink))) << "1.5x the link for both together";
  EXPECT_FALSE(p.should_compress(kBig, FakeEngine(10 * kLink, kLink))) << "a decoder no faster than the link";
  EXPECT_FALSE(p.should_compress(kBig, FakeEngine(2 * kLink, 2 * kLink))) << "each twice the link, together once";
  EXPECT_DOUBLE_EQ(coding_rate(FakeEngine(3, 6)), 2.0);
  EXPECT_DOUBLE_EQ(coding_rate(FakeEngine(3, 0)), 3.0) << "no decode measured yet: the encoder's";
}

// would_compress(): should_compress's answer, probes included, without touching the policy's state.
TEST(CompressPolicy, WouldCompressIsTheDecisionWithoutItsEffects) {
  FakeEngine fast(10 * kLink), slow(kLink), unmeasured(0);
  CompressPolicy p(ZipMode::kAuto, kLink);
  EXPECT_TRUE(p.would_compress(kBig, fast));
  EXPECT_FALSE(p.would_compress(kBig, slow));
  EXPECT_FALSE(p.would_compress(1000, fast)) << "below NCCL_ZIP_MIN_BYTES";
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(p.would_compress(kBig, unmeasured)) << "it would measure it";
  EXPECT_TRUE(p.should_compress(kBig, unmeasured)) << "asking changed nothing: the first probe is still to come";
  EXPECT_FALSE(p.would_compress(kBig, unmeasured)) << "that probe is still measuring";
  p.record(kBig, kBig);
  for (int i = 0; i < 20; ++i) p.record(kBig, kBig);  // incompressible lately
  int probes = 0;
  for (int i = 0; i < 64; ++i) {
    const bool would = p.would_compress(kBig, fast);
    EXPECT_EQ(would, p.should_compress(kBig, fast)) << "message " << i;
    probes += would;
  }
  EXPECT_EQ(probes, 4) << "one message in 16 probes incompressible data";
  int slow_probes = 0;
  CompressPolicy q(ZipMode::kAuto, kLink);
  for (int i = 0; i < 768; ++i) {
    const bool would = q.would_compress(kBig, slow);
    EXPECT_EQ(would, q.should_compress(kBig, slow)) << "message " << i;
    slow_probes += would;
  }
  EXPECT_EQ(slow_probes, 2) << "after 256 and 512 more messages a slow codec is measured again";
  EXPECT_FALSE(CompressPolicy(ZipMode::kOff, kLink).would_compress(kBig, fast));
  EXPECT_TRUE(CompressPolicy(ZipMode::kAlways, kLink).would_compress(1, slow));
}

// A quiet receiver offers staging on one receive in 64: the messages sent raw meanwhile count
// toward the sender's probes, so that the offer finds one due (two probe rates multiplied took
// ~1,000 messages to notice that the data had become compressible).
TEST(CompressPolicy, MessagesSentUnofferedCountTowardTheProbes) {
  FakeEngine fast(10 * kLink), slow(kLink);
  CompressPolicy p(ZipMode::kAuto, kLink);
  for (int i = 0; i < 20; ++i) p.record(kBig, kBig);  // incompressible lately
  ASSERT_FALSE(p.would_compress(kBig, fast));
  for (int i = 0; i < 100; ++i) p.unoffered(kBig, fast);
  EXPECT_TRUE(p.should_compress(kBig, fast)) << "the first offer after 15 unoffered messages probes";
  EXPECT_FALSE(p.should_compress(kBig, fast)) << "and the count starts over";
  for (int i = 0; i < 100; ++i) p.unoffered(1000, fast);
  EXPECT_FALSE(p.would_compress(kBig, fast)) << "messages below NCCL_ZIP_MIN_BYTES are no probe's business";
  CompressPolicy q(ZipMode::kAuto, kLink);
  for (int i = 0; i < 1000; ++i) q.unoffered(kBig, slow);
  EXPECT_TRUE(q.should_compress(kBig, slow)) << "a slow codec is measured again at the first offer";
  EXPECT_FALSE(q.should_compress(kBig, slow));
}

TEST(CompressPolicy, AutoMeasuresAnUnmeasuredCodecOneMessageAtATime) {
  FakeEngine unmeasured(0);
  CompressPolicy p(ZipMode::kAuto, kLink);
  EXPECT_TRUE(p.should_compress(kBig, unmeasured));
  EXPECT_FALSE(p.should_compress(kBig, unmeasured)) << "the first one is still measuring";
  p.record(kBig, kBig * 7 / 10);
  EXPECT_TRUE(p.should_compress(kBig, unmeasured));
}

// A first sample (one job, maybe on a kernel just started) that puts the codec below the link is
// measured on one message at a time, as an unmeasured codec is, and the receiver told the sender
// wants staging; only a settled rate below the link backs off for hundreds of messages. (On one
// H200 a rank whose first job read 4.6 GB/s against a 4 GB/s link sent a short job all raw, the
// other rank's codec reading 21 GB/s.)
TEST(CompressPolicy, ACodecSlowOnAFirstSampleIsMeasuredOn) {
  FakeEngine first(kLink, 0, false);
  CompressPolicy p(ZipMode::kAuto, kLink);
  RawWhy why = RawWhy::kUnsaid;
  EXPECT_TRUE(p.should_compress(kBig, first)) << "measures it";
  EXPECT_FALSE(p.should_compress(kBig, first, 0, &why)) << "one at a time";
  EXPECT_EQ(why, RawWhy::kWanted);
  p.record(kBig, kBig * 7 / 10);
  EXPECT_TRUE(p.should_compress(kBig, first)) << "measured on";
  p.record(kBig, kBig * 7 / 10);
  first.settle();
  EXPECT_FALSE(p.should_compress(kBig, first, 0, &why)) << "settled and slower than the link";
  EXPECT_EQ(why, RawWhy::kDeclined);
  int tries = 0;
  for (int i = 0; i < 254; ++i) tries += p.should_compress(kBig, first);
  EXPECT_EQ(tries, 0) << "backs off as for any slow codec";
}

TEST(CompressPolicy, AnAttemptThatCodedNothingLetsTheNextOneMeasure) {
  FakeEngine unmeasured(0);
  CompressPolicy p(ZipMode::kAuto, kLink);
  EXPECT_TRUE(p.should_compress(kBig, unmeasured));
  p.unmeasured();  // e.g. sent raw because the GPU codec was not running yet
  EXPECT_TRUE(p.should_compress(kBig, unmeasured)) << "a skipped probe must not stop all later ones";
}

// A slow codec is measured again (a first measurement may have been a cold or crowded one),
// less often each time it is still slow: where it is slow its probes are slow too.
TEST(CompressPolicy, ACodecSlowerThanTheLinkIsMeasuredAgainLessOftenEachTime) {
  FakeEngine slow(kLink), fast(10 * kLink);
  CompressPolicy p(ZipMode::kAuto, kLink);
  std::vector<int> at;
  for (int i = 1; i <= 1 << 18; ++i)
    if (p.should_compress(kBig, slow)) at.push_back(i);
  ASSERT_EQ(at.size(), 11u) << "8 probes with gaps 256, 512 ... 32,768, then one in 65,536";
  for (size_t k = 0; k < at.size(); ++k)
    EXPECT_EQ(at[k] - (k ? at[k - 1] : 0), 256 << std::min<size_t>(k, 8)) << "probe " << k;

  CompressPolicy q(ZipMode::kAuto, kLink);
  for (int i = 0; i < 255; ++i) ASSERT_FALSE(q.should_compress(kBig, slow));
  ASSERT_TRUE(q.should_compress(kBig, slow));
  q.unmeasured();  // that measurement did not happen (no kernel running yet)
  EXPECT_TRUE(q.should_compress(kBig, slow)) << "tried again with the next message";
  EXPECT_TRUE(q.should_compress(kBig, fast)) << "a codec that keeps up compresses";
  int tries = 0;
  for (int i = 0; i < 256; ++i) tries += q.should_compress(kBig, slow);
  EXPECT_EQ(tries, 1) << "slow again: measured after 256 messages, as at first";
}

TEST(CompressPolicy, IncompressibleDataIsProbedNowAndThen) {
  FakeEngine fast(10 * kLink);
  CompressPolicy p(ZipMode::kAuto, kLink);
  for (int i = 0; i < 20; ++i) p.record(kBig, kBig);  // ratio 1: above NCCL_ZIP_MAX_RATIO_PCT
  int tries = 0;
  for (int i = 0; i < 64; ++i) tries += p.should_compress(kBig, fast);
  EXPECT_EQ(tries, 4) << "one probe every 16 messages";
  for (int i = 0; i < 20; ++i) p.record(kBig, kBig / 2);  // compressible again
  EXPECT_TRUE(p.should_compress(kBig, fast));
}

// A device that knows its speed plans with it whatever the meter reads (a burst into a buffer
// reads far above the line rate); one that does not plans with the meter's peak, which the
// slow phases after it do not lower.
TEST(CompressPolicy, TheMeterPlansOnlyWhereTheDeviceDoesNotKnowItsSpeed) {
  constexpr int64_t kMs = 1000000, kLate = 10 * LinkMeter::kSettleNs;
  FakeEngine codec(4 * kLink);
  LinkMeter meter;
  CompressPolicy known(ZipMode::kAuto, kLink, &meter), unknown(ZipMode::kAuto, 0, &meter);
  meter.add(0, 10 * kMs, uint64_t(1e9), 10 * kMs);  // 100 GB/s
  meter.add(kLate, kLate, 0, kLate + LinkMeter::kSettleNs);
  EXPECT_GT(meter.peak_bytes_per_s(), 4 * kLink);
  EXPECT_TRUE(known.should_compress(kBig, codec)) << "the reported speed stands";
  EXPECT_FALSE(unknown.should_compress(kBig, codec)) << "planned with the measured 100 GB/s";
  for (int i = 0; i < 400; ++i) meter.add(kLate + i * kMs, kLate + (i + 1) * kMs, 100000, kLate + (i + 1) * kMs);
  meter.add(2 * kLate, 2 * kLate, 0, 2 * kLate + LinkMeter::kSettleNs);
  ASSERT_LT(meter.bytes_per_s(), 2 * kLink);
  EXPECT_FALSE(unknown.should_compress(kBig, codec)) << "planned with the link's peak";
}

// The codec's measured rate moves with the load: a connection that compresses goes on while the
// codec beats the link at all, and starts again only past the margin.
TEST(CompressPolicy, OnceCompressingTheCodecNeedOnlyBeatTheLink) {
  FakeEngine marginal(1.1 * kLink), ample(1.3 * kLink), slower(0.95 * kLink);
  CompressPolicy p(ZipMode::kAuto, kLink);
  EXPECT_FALSE(p.should_compress(kBig, marginal)) << "not yet compressing: the margin stands";
  EXPECT_TRUE(p.should_compress(kBig, ample));
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(p.should_compress(kBig, marginal)) << i;
  EXPECT_FALSE(p.should_compress(kBig, slower));
  EXPECT_FALSE(p.should_compress(kBig, marginal)) << "stopped: the margin again";
  EXPECT_TRUE(p.should_compress(kBig, ample));
}

// The summary says why offered messages went raw; forced mode declines nothing.
TEST(CompressPolicy, DeclinesAreCountedByCause) {
  FakeEngine fast(4 * kLink), slow(kLink / 2);
  CompressPolicy p(ZipMode::kAuto, kLink);
  EXPECT_EQ(p.declines(), "");
  EXPECT_FALSE(p.should_compress(1000, fast));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(p.should_compress(kBig, slow));
  EXPECT_FALSE(p.would_compress(1000, fast)) << "asking does not count";
  EXPECT_EQ(p.declines(), "declined 4 (small for the link 1, slow codec 3)");
  CompressPolicy always(ZipMode::kAlways, kLink);
  EXPECT_TRUE(always.should_compress(1, slow));
  EXPECT_EQ(always.declines(), "");
}

// A codec with jobs queued makes a message wait for them; the link waits too once it has moved
// what it already has. At ratio 0.7 a 1 MiB message saves 251.7 us of a 1.25 GB/s link: up to that
// idle it is coded, beyond it goes raw, wanted: the receiver keeps offering (offer_gate.h), as a
// decline would make it stop. The backlog is the device's, every comm's bytes together.
TEST(CompressPolicy, ACodecQueueLongerThanTheLinksSendsRaw) {
  FakeEngine codec(10 * kLink, 10 * kLink);
  LinkBacklog backlog;
  CompressPolicy p(ZipMode::kAuto, kLink, nullptr, &backlog), unweighed(ZipMode::kAuto, kLink);
  const double saved_s = kBig * (1 - kAssumedRatio) / kLink;
  codec.queue(saved_s - 1e-6);
  EXPECT_TRUE(p.should_compress(kBig, codec)) << "the link idles for less than the message saves";
  codec.queue(saved_s + 1e-6);
  RawWhy why = RawWhy::kUnsaid;
  EXPECT_FALSE(p.should_compress(kBig, codec, 0, &why)) << "the link would idle longer than it saves";
  EXPECT_EQ(why, RawWhy::kWanted);
  EXPECT_FALSE(p.would_compress(kBig, codec)) << "nothing to wait for a kernel for";
  EXPECT_TRUE(unweighed.should_compress(kBig, codec)) << "no backlog given: the queue is not weighed";
  backlog.add(int64_t(2e-6 * kLink));  // 2 us of bytes on the link: the idle shrinks below the saving
  EXPECT_TRUE(p.should_compress(kBig, codec));
  codec.queue(1.0);
  backlog.add(int64_t(1.0 * kLink));
  EXPECT_TRUE(p.should_compress(kBig, codec)) << "a second's queue behind a second's backlog";
  EXPECT_EQ(p.declines(), "declined 1 (busy codec 1)");
  CompressPolicy always(ZipMode::kAlways, kLink, nullptr, &backlog);
  codec.queue(100.0);
  EXPECT_TRUE(always.should_compress(kBig, codec)) << "forced compression waits";
}

// LinkBacklog: counts what is added and taken away, never below nothing.
TEST(LinkBacklog, CountsWhatIsOnTheLink) {
  LinkBacklog b;
  EXPECT_EQ(b.bytes(), 0);
  b.add(1000);
  b.add(500);
  b.add(-1000);
  EXPECT_EQ(b.bytes(), 500);
  b.add(-600);
  EXPECT_EQ(b.bytes(), 0) << "a reading that passes zero reads as none";
  EXPECT_EQ(link_backlog(3), link_backlog(3)) << "one per device";
  EXPECT_NE(link_backlog(3), link_backlog(4));
}

// A device that does not know its speed (reported 0): nothing compressed on a guess, raw until the
// meter has seen the link busy; then the usual rule against what it measured. Forced mode as ever.
TEST(CompressPolicy, ALinkOfUnknownSpeedIsMeasuredBeforeAutoCompresses) {
  FakeEngine codec(4 * kLink);
  LinkMeter meter;
  CompressPolicy p(ZipMode::kAuto, 0, &meter), always(ZipMode::kAlways, 0, &meter);
  EXPECT_FALSE(p.should_compress(kBig, codec));
  EXPECT_FALSE(p.should_compress(kBig, codec, 1e9)) << "no bytes ahead hide coding on an unmeasured link";
  EXPECT_TRUE(always.should_compress(kBig, codec));
  meter.add(0, 800 * 1000000, uint64_t(1e9), 800 * 1000000);  // 1.25 GB/s
  meter.add(1000 * 1000000, 1000 * 1000000, 0, 1000 * 1000000 + LinkMeter::kSettleNs);
  EXPECT_DOUBLE_EQ(planning_link_bps(0, &meter), kLink);
  EXPECT_TRUE(p.should_compress(kBig, codec));
}

}  // namespace
}  // namespace zipccl
