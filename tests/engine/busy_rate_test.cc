// BusyRate (a server's sustained rate while busy) and the link meter the policy reads.
#include "busy_rate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "codec_engine.h"
#include "link_meter.h"
#include "policy.h"

namespace zipccl {
namespace {

constexpr int64_t kMs = 1000000;
constexpr uint64_t kMB = 1000000;

TEST(BusyRate, QueuedJobsCountTheirTimeOnce) {
  BusyRate r;
  for (int i = 0; i < 4; ++i) r.started(0);
  r.finished(10 * kMs, kMB);  // the first job gives the first value
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 100e6);
  // Three more, finishing 10 ms apart: each waited behind the others (latency 20-40 ms), but
  // the server moved 1 MB every 10 ms.
  for (int i = 2; i <= 4; ++i) r.finished(i * 10 * kMs, kMB);
  EXPECT_EQ(r.outstanding(), 0);
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 100e6) << "3 MB is not yet a window: the first value stands";
  r.started(40 * kMs);
  r.finished(50 * kMs, 2 * kMB);  // 5 MB in 40 ms of busy time: 125 MB/s, averaged in
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 0.5 * 100e6 + 0.5 * 125e6);
}

TEST(BusyRate, IdleTimeDoesNotCount) {
  BusyRate r;
  r.started(0);
  r.finished(10 * kMs, kMB);
  for (int i = 1; i <= 5; ++i) {  // 1 MB in 10 ms, once a second
    r.started(i * 1000 * kMs);
    r.finished(i * 1000 * kMs + 10 * kMs, kMB);
  }
  EXPECT_DOUBLE_EQ(r.bytes_per_s(), 100e6);
}

class FixedCodec : public CodecEngine {
 public:
  explicit FixedCodec(double bps) : bps_(bps) {}
  const char* name() const override { return "fixed"; }
  void submit(CodecJob*) override {}
  void poll() override {}
  double throughput(CodecJob::Op) const override { return bps_; }

 private:
  double bps_;
};

// A device that says 10 Gb/s but moved a gigabyte in well under a second: the codec that beats
// the reported speed does not beat the measured one. A device measured at less than twice its
// speed keeps it (sends complete into socket buffers in bursts).
TEST(LinkMeter, PolicyTrustsAFasterMeasuredLink) {
  constexpr double kReported = 1.25e9;
  FixedCodec codec(5e9);
  LinkMeter meter;
  CompressPolicy measured(ZipMode::kAuto, kReported, &meter), reported(ZipMode::kAuto, kReported);
  EXPECT_TRUE(measured.should_compress(1 << 20, codec)) << "nothing measured yet: the reported speed";
  meter.started();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  meter.finished(uint64_t(1e9));
  EXPECT_GT(meter.bytes_per_s(), 5e9);
  EXPECT_FALSE(measured.should_compress(1 << 20, codec));
  EXPECT_TRUE(reported.should_compress(1 << 20, codec)) << "without a meter the reported speed stands";
  LinkMeter bursty;
  CompressPolicy near(ZipMode::kAuto, 1e9 / 0.4 / 1.9, &bursty);  // the gigabyte below in 400 ms: 1.9x
  bursty.started();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  bursty.finished(uint64_t(1e9));
  ASSERT_LT(bursty.bytes_per_s(), 2 * 1e9 / 0.4 / 1.9);
  FixedCodec fast(1.2 * 1e9 / 0.4 / 1.9 * 1.01);  // just beats the reported speed by the margin
  EXPECT_TRUE(near.should_compress(1 << 20, fast)) << "measured below twice the reported speed";
  EXPECT_EQ(link_meter(3), link_meter(3)) << "one meter per device";
  EXPECT_NE(link_meter(3), link_meter(4));
}

}  // namespace
}  // namespace zipccl
