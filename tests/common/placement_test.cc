// placement_misfit(): the one check of a peer's message header against the placement it claims,
// before any of its bytes are trusted.
#include <gtest/gtest.h>

#include "transport.h"

namespace zipccl {
namespace {

MessageHeader header(bool compressed, uint64_t wire, uint64_t orig) {
  MessageHeader h;
  h.compressed = compressed;
  h.wire_bytes = wire;
  h.orig_bytes = orig;
  return h;
}

TEST(PlacementMisfit, RawFitsTheTarget) {
  Placement p;
  p.capacity = 1000;
  EXPECT_EQ(placement_misfit(p, header(false, 1000, 1000)), nullptr);
  EXPECT_EQ(placement_misfit(p, header(false, 0, 0)), nullptr);
  EXPECT_NE(placement_misfit(p, header(false, 1001, 1001)), nullptr);
  EXPECT_NE(placement_misfit(p, header(false, 100, 200)), nullptr) << "raw sizes must agree";
}

TEST(PlacementMisfit, CompressedNeedsStaging) {
  Placement p;
  p.capacity = 1000;
  EXPECT_NE(placement_misfit(p, header(true, 300, 1000)), nullptr) << "raw-only receive";
  p.staging_bytes = 1200;
  EXPECT_EQ(placement_misfit(p, header(true, 300, 1000)), nullptr);
  EXPECT_EQ(placement_misfit(p, header(true, 1200, 0)), nullptr) << "decoded size not announced";
  EXPECT_NE(placement_misfit(p, header(true, 1201, 1000)), nullptr);
  EXPECT_NE(placement_misfit(p, header(true, 300, 1001)), nullptr) << "decodes to more than the receive takes";
}

// Only a raw message says why it went raw: a compressed one that does is no peer of ours.
TEST(PlacementMisfit, OnlyRawMessagesSayWhy) {
  Placement p;
  p.capacity = 1000;
  p.staging_bytes = 1200;
  for (uint32_t w = 0; w < kRawWhyValues; ++w) {
    MessageHeader raw = header(false, 1000, 1000), coded = header(true, 300, 1000);
    raw.why = coded.why = RawWhy(w);
    EXPECT_EQ(placement_misfit(p, raw), nullptr) << w;
    EXPECT_EQ(placement_misfit(p, coded) == nullptr, RawWhy(w) == RawWhy::kUnsaid) << w;
  }
}

}  // namespace
}  // namespace zipccl
