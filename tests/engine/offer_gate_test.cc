// OfferGate: a receiver stops offering staging to a sender that declines it, probes now and
// then, and offers again from the first compressed arrival.
#include "offer_gate.h"

#include <gtest/gtest.h>

namespace zipccl {
namespace {

// Posts n receives; how many offered.
int post(OfferGate* g, int n) {
  int offered = 0;
  for (int i = 0; i < n; ++i) {
    offered += g->offer();
    g->posted();
  }
  return offered;
}

TEST(OfferGate, OffersUntilTheSenderDeclinesLargeMessagesInARow) {
  OfferGate g;
  for (uint32_t i = 0; i + 1 < OfferGate::kQuietAfter; ++i) g.arrived(true, false, true);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 100), 100);
  g.arrived(true, false, true);
  EXPECT_TRUE(g.quiet());
  // Probes: one receive in kProbeEvery.
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 10);
}

TEST(OfferGate, SmallOrUnofferedRawArrivalsSayNothing) {
  OfferGate g;
  for (int i = 0; i < 1000; ++i) {
    g.arrived(true, false, false);  // below the size the sender compresses
    g.arrived(false, false, true);  // no staging was offered
  }
  EXPECT_FALSE(g.quiet());
}

TEST(OfferGate, ACompressedArrivalEndsTheQuietAndTheCount) {
  OfferGate g;
  for (uint32_t i = 0; i < OfferGate::kQuietAfter; ++i) g.arrived(true, false, true);
  ASSERT_TRUE(g.quiet());
  g.arrived(true, true, true);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 50), 50);
  // The count starts over: a run of declines one short of the limit keeps the offers.
  for (uint32_t i = 0; i + 1 < OfferGate::kQuietAfter; ++i) g.arrived(true, false, true);
  EXPECT_FALSE(g.quiet());
  g.arrived(true, true, true);
  for (uint32_t i = 0; i + 1 < OfferGate::kQuietAfter; ++i) g.arrived(true, false, true);
  EXPECT_FALSE(g.quiet());
}

// NCCL calls irecv again when one returns no request (a cold kernel's wait): the probe's answer
// holds until that receive is posted.
TEST(OfferGate, AProbeHoldsUntilItsReceiveIsPosted) {
  OfferGate g;
  for (uint32_t i = 0; i < OfferGate::kQuietAfter; ++i) g.arrived(true, false, true);
  ASSERT_TRUE(g.quiet());
  int until_probe = 0;
  while (!g.offer()) {
    g.posted();
    ++until_probe;
  }
  EXPECT_EQ(until_probe, int(OfferGate::kProbeEvery) - 1);
  for (int retry = 0; retry < 5; ++retry) EXPECT_TRUE(g.offer());
  g.posted();
  EXPECT_FALSE(g.offer());
}

// A cold kernel is worth waiting for only while the sender compresses: not before anything
// arrived compressed, nor after a large message came raw into offered staging; small or
// unoffered raw arrivals leave the answer as it was.
TEST(OfferGate, ExpectsCompressedBytesOnlyAfterTheLastLargeOneCameCompressed) {
  OfferGate g;
  EXPECT_FALSE(g.expecting());
  g.arrived(true, true, true);
  EXPECT_TRUE(g.expecting());
  g.arrived(true, false, false);
  g.arrived(false, false, true);
  EXPECT_TRUE(g.expecting());
  g.arrived(true, false, true);
  EXPECT_FALSE(g.expecting());
  g.arrived(true, true, true);
  EXPECT_TRUE(g.expecting());
}

}  // namespace
}  // namespace zipccl
