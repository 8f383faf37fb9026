// OfferGate: a receiver offers staging from its first large arrival, stops offering to a sender
// that declines it, probes now and then, and offers again from the first compressed arrival.
#include "offer_gate.h"

#include <gtest/gtest.h>

namespace zipccl {
namespace {

// Posts n receives, each offering where the gate says so; how many offered.
int post(OfferGate* g, int n) {
  int offered = 0;
  for (int i = 0; i < n; ++i) {
    const bool o = g->offer();
    offered += o;
    g->posted(o);
  }
  return offered;
}

// n messages arrive raw into offered staging (the sender declined them), large or not.
void declined(OfferGate* g, uint32_t n, bool large) {
  for (uint32_t i = 0; i < n; ++i) g->arrived(true, false, large);
}

// A gate its first large message has opened.
OfferGate opened() {
  OfferGate g;
  g.arrived(false, false, true);
  return g;
}

// A new connection offers nothing, not even probes, until a message its sender could compress
// arrives; small ones leave it quiet.
TEST(OfferGate, ANewGateOpensAtTheFirstLargeArrival) {
  OfferGate g;
  EXPECT_TRUE(g.quiet());
  EXPECT_FALSE(g.expecting());
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 0);
  for (int i = 0; i < 100; ++i) g.arrived(false, false, false);
  EXPECT_TRUE(g.quiet());
  g.arrived(false, false, true);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 50), 50);
}

TEST(OfferGate, OffersUntilTheSenderDeclinesMessagesInARow) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfter - 1, true);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 100), 100);
  g.arrived(true, false, true);
  EXPECT_TRUE(g.quiet());
  // Probes: one receive in kProbeEvery.
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 10);
}

TEST(OfferGate, UnofferedRawArrivalsSayNothing) {
  OfferGate g = opened();
  for (int i = 0; i < 1000; ++i) g.arrived(false, false, true);
  EXPECT_FALSE(g.quiet());
}

// Small collectives' messages come raw (too short to pay for their coding): offering staging
// for them only keeps the kernel resident, so a few in a row end the offers, probes too (a large
// arrival reopens the gate). A large collective's one short message between compressed ones does
// not.
TEST(OfferGate, SmallRawArrivalsIntoOfferedStagingAreDeclines) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfterSmall - 1, false);
  EXPECT_FALSE(g.quiet());
  g.arrived(true, false, false);
  EXPECT_TRUE(g.quiet());
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 0);

  OfferGate h = opened();
  for (int i = 0; i < 100; ++i) {
    for (int j = 0; j < 7; ++j) h.arrived(true, true, true);
    h.arrived(true, false, false);
  }
  EXPECT_FALSE(h.quiet());
  // Large declines and small ones in turn: the run of small ones starts over, the count does not.
  OfferGate k = opened();
  for (uint32_t i = 0; i + 1 < OfferGate::kQuietAfter; ++i) k.arrived(true, false, i % 2 == 0);
  EXPECT_FALSE(k.quiet());
  k.arrived(true, false, false);
  EXPECT_TRUE(k.quiet());
  EXPECT_EQ(post(&k, 10 * OfferGate::kProbeEvery), 10) << "large ones were declined too: probes";
}

// A large message that arrives raw into offered staging while the gate is quiet over small ones
// (it was offered before the quiet: NCCL posts up to 8 receives at once) starts the probes.
TEST(OfferGate, ALargeDeclineInAQuietOverSmallMessagesStartsProbes) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfterSmall, false);
  ASSERT_TRUE(g.quiet());
  EXPECT_EQ(post(&g, 3 * OfferGate::kProbeEvery), 0);
  g.arrived(true, false, true);
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 10);
}

TEST(OfferGate, ACompressedArrivalEndsTheQuietAndTheCount) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfter, true);
  ASSERT_TRUE(g.quiet());
  g.arrived(true, true, true);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 50), 50);
  // The count starts over: a run of declines one short of the limit keeps the offers.
  declined(&g, OfferGate::kQuietAfter - 1, true);
  EXPECT_FALSE(g.quiet());
  g.arrived(true, true, true);
  declined(&g, OfferGate::kQuietAfter - 1, true);
  EXPECT_FALSE(g.quiet());
}

// Quiet over small collectives only: a large collective's first message, arriving unoffered,
// asks again at once rather than at the next probe; after large declines it does not.
TEST(OfferGate, ALargeArrivalEndsAQuietOverSmallMessages) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfter, false);
  ASSERT_TRUE(g.quiet());
  g.arrived(false, false, false);
  EXPECT_TRUE(g.quiet()) << "another small one";
  g.arrived(false, false, true);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 50), 50);
  EXPECT_FALSE(g.expecting()) << "nothing came compressed yet";

  OfferGate h = opened();
  h.arrived(true, false, true);
  declined(&h, OfferGate::kQuietAfter - 1, false);
  ASSERT_TRUE(h.quiet());
  for (int i = 0; i < 100; ++i) h.arrived(false, false, true);
  EXPECT_TRUE(h.quiet()) << "the sender declined a large one: only a probe or a compressed arrival asks again";
  h.arrived(true, true, true);
  EXPECT_FALSE(h.quiet());
  declined(&h, OfferGate::kQuietAfter, false);
  ASSERT_TRUE(h.quiet());
  h.arrived(false, false, true);
  EXPECT_FALSE(h.quiet()) << "the compressed arrival cleared the large declines";
}

// Small collectives between large compressed ones: the large arrival that ends the quiet expects
// compressed bytes again (its next receive waits for a cold kernel), as it did before the small
// run; not after a large one came raw into offered staging.
TEST(OfferGate, AQuietOverSmallMessagesKeepsWhatItExpected) {
  OfferGate g = opened();
  g.arrived(true, true, true);
  ASSERT_TRUE(g.expecting());
  declined(&g, OfferGate::kQuietAfterSmall, false);
  ASSERT_TRUE(g.quiet());
  EXPECT_FALSE(g.expecting()) << "quiet: no waits for the kernel";
  g.arrived(false, false, true);
  EXPECT_FALSE(g.quiet());
  EXPECT_TRUE(g.expecting());

  OfferGate h = opened();
  h.arrived(true, true, true);
  h.arrived(true, false, true);  // a large one declined: the sender may have stopped
  declined(&h, OfferGate::kQuietAfterSmall, false);
  ASSERT_TRUE(h.quiet());
  h.arrived(false, false, true);
  EXPECT_TRUE(h.quiet()) << "after a large decline only a probe or a compressed arrival asks again";
  h.arrived(true, true, true);
  EXPECT_TRUE(h.expecting());
}

// NCCL calls irecv again when one returns no request (a cold kernel's wait): the probe's answer
// holds until that receive is posted, and past receives that could not offer (no lease: the
// kernel was stopped) until one does.
TEST(OfferGate, AProbeHoldsUntilAReceiveMakesIt) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfter, true);
  ASSERT_TRUE(g.quiet());
  int until_probe = 0;
  while (!g.offer()) {
    g.posted(false);
    ++until_probe;
  }
  EXPECT_EQ(until_probe, int(OfferGate::kProbeEvery) - 1);
  for (int retry = 0; retry < 5; ++retry) EXPECT_TRUE(g.offer());
  for (int cold = 0; cold < 3; ++cold) {
    g.posted(false);
    EXPECT_TRUE(g.offer()) << "a probe no receive could make is still due";
  }
  g.posted(true);
  EXPECT_FALSE(g.offer());
}

// A cold kernel is worth waiting for only while the sender compresses: not before anything
// arrived compressed, nor after a large message came raw into offered staging, nor once the gate
// is quiet; a collective's short last message or an unoffered raw arrival leaves it as it was.
TEST(OfferGate, ExpectsCompressedBytesOnlyAfterTheLastLargeOneCameCompressed) {
  OfferGate g = opened();
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
  declined(&g, OfferGate::kQuietAfter, false);
  ASSERT_TRUE(g.quiet());
  EXPECT_FALSE(g.expecting());
}

}  // namespace
}  // namespace zipccl
