// OfferGate: a receiver offers staging from the first message its sender would compress, stops
// offering to a sender that declines it, probes now and then, and offers again from the first
// compressed arrival; it follows what the sender says of each raw message (RawWhy).
#include "offer_gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>

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

// n messages arrive raw into offered staging, declined: too small to pay (kSmall) or for another
// reason (kDeclined: the data or the codec).
void declined(OfferGate* g, uint32_t n, RawWhy why) {
  for (uint32_t i = 0; i < n; ++i) g->arrived(true, false, why);
}

// A message the sender would have compressed arrives without staging offered.
void wanted(OfferGate* g) { g->arrived(false, false, RawWhy::kWanted); }
void compressed(OfferGate* g) { g->arrived(true, true, RawWhy::kUnsaid); }

// A gate its first wanted message has opened.
OfferGate opened() {
  OfferGate g;
  wanted(&g);
  return g;
}

// A gate quiet after declines whose probe was made, and 3 receives posted since, before the
// probe's message came.
void probe_out(OfferGate* g) {
  *g = opened();
  declined(g, OfferGate::kQuietAfter, RawWhy::kDeclined);
  ASSERT_TRUE(g->quiet());
  EXPECT_EQ(post(g, int(OfferGate::kProbeEvery)), 1);
  post(g, 3);
}

// A new connection offers nothing, not even probes, until a message its sender would compress
// arrives; small ones leave it quiet.
TEST(OfferGate, ANewGateOpensAtTheFirstMessageItsSenderWouldCompress) {
  OfferGate g;
  EXPECT_TRUE(g.quiet());
  EXPECT_FALSE(g.expecting());
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 0);
  for (int i = 0; i < 100; ++i) g.arrived(false, false, RawWhy::kSmall);
  for (int i = 0; i < 100; ++i) g.arrived(false, false, RawWhy::kDeclined);
  EXPECT_TRUE(g.quiet());
  wanted(&g);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 50), 50);
}

// Pushable (its sender may push past the receive): a quiet gate's receive that neither offers nor
// probes; any distance where no probe is to come (a new connection, a run of small messages), else
// never as far as the next probe, and the probe itself not.
TEST(OfferGate, PushableWhileAReceiveNeitherOffersNorProbes) {
  OfferGate g;
  EXPECT_TRUE(g.pushable()) << "a new connection";
  EXPECT_EQ(g.push_ahead(), kPushAny);
  for (int i = 0; i < 100; ++i) g.arrived(false, false, RawWhy::kDeclined);
  EXPECT_TRUE(g.pushable()) << "unoffered declines start no probes";
  EXPECT_EQ(g.push_ahead(), kPushAny);
  wanted(&g);
  EXPECT_FALSE(g.pushable()) << "open";
  declined(&g, OfferGate::kQuietAfterSmall, RawWhy::kSmall);
  ASSERT_TRUE(g.quiet());
  EXPECT_TRUE(g.pushable()) << "quiet over small messages";
  EXPECT_EQ(g.push_ahead(), kPushAny);
  EXPECT_EQ(post(&g, 3 * OfferGate::kProbeEvery), 0);
  declined(&g, 1, RawWhy::kDeclined);  // a larger decline: probes to make
  // Between probes every receive may be pushed past, never as far as the next probe; the probe,
  // until a receive makes it, not.
  int pushable = 0, probes = 0;
  for (uint32_t i = 0; i < 3 * OfferGate::kProbeEvery; ++i) {
    const bool o = g.offer();
    ASSERT_NE(g.pushable(), o) << "receive " << i << ": a probe waits to be seen, no other does";
    if (o) {
      g.posted(false);  // its kernel was stopped: the probe is still due, and still no push
      EXPECT_FALSE(g.pushable());
      ++probes;
    } else {
      ++pushable;
      // Receives after this one before the probe, each at least one placement.
      uint32_t before = 0;
      OfferGate ahead = g;
      for (ahead.posted(false); !ahead.offer(); ahead.posted(false)) ++before;
      EXPECT_EQ(g.push_ahead(), std::min(before, OfferGate::kPushAhead)) << "receive " << i;
    }
    g.posted(o);
  }
  EXPECT_EQ(probes, 3);
  EXPECT_EQ(pushable, int(3 * OfferGate::kProbeEvery) - 3);
  OfferGate h = opened();
  declined(&h, OfferGate::kQuietAfter, RawWhy::kDeclined);
  ASSERT_TRUE(h.quiet());
  EXPECT_TRUE(h.pushable()) << "quiet after declines, no probe due";
  EXPECT_LE(h.push_ahead(), OfferGate::kPushAhead);
  compressed(&h);
  EXPECT_FALSE(h.pushable()) << "open again";
}

TEST(OfferGate, OffersUntilTheSenderDeclinesMessagesInARow) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfter - 1, RawWhy::kDeclined);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 100), 100);
  declined(&g, 1, RawWhy::kDeclined);
  EXPECT_TRUE(g.quiet());
  // Probes: one receive in kProbeEvery.
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 10);
}

// A raw message its sender wanted to compress is no decline: into offered staging its sender's
// kernel was not running, and unoffered it found no staging. The gate stays open and expecting,
// until kQuietAfterCold in a row say the sender's kernel does not start: then it goes quiet, with
// probes.
TEST(OfferGate, AMessageTheSenderWantedToCompressIsNoDecline) {
  OfferGate g = opened();
  compressed(&g);
  for (int i = 0; i < 1000; ++i) wanted(&g);
  for (uint32_t i = 0; i + 1 < OfferGate::kQuietAfterCold; ++i) g.arrived(true, false, RawWhy::kWanted);
  EXPECT_FALSE(g.quiet());
  EXPECT_TRUE(g.expecting());
  compressed(&g);
  for (uint32_t i = 0; i + 1 < OfferGate::kQuietAfterCold; ++i) g.arrived(true, false, RawWhy::kWanted);
  EXPECT_FALSE(g.quiet()) << "the compressed arrival started the count over";
  g.arrived(true, false, RawWhy::kWanted);
  EXPECT_TRUE(g.quiet());
  EXPECT_FALSE(g.expecting());
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 10);
  // Nor does one break a run of declines: the count goes on.
  OfferGate h = opened();
  declined(&h, OfferGate::kQuietAfter - 1, RawWhy::kDeclined);
  h.arrived(true, false, RawWhy::kWanted);
  declined(&h, 1, RawWhy::kDeclined);
  EXPECT_TRUE(h.quiet());
}

// Small collectives' messages come raw (too short to pay for their coding): offering staging
// for them only keeps the kernel resident, so a few in a row end the offers, probes too (a wanted
// arrival opens the gate again). A large collective's one short message between compressed ones
// does not.
TEST(OfferGate, SmallRawArrivalsIntoOfferedStagingAreDeclines) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfterSmall - 1, RawWhy::kSmall);
  EXPECT_FALSE(g.quiet());
  declined(&g, 1, RawWhy::kSmall);
  EXPECT_TRUE(g.quiet());
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 0);

  OfferGate h = opened();
  for (int i = 0; i < 100; ++i) {
    for (int j = 0; j < 7; ++j) compressed(&h);
    declined(&h, 1, RawWhy::kSmall);
  }
  EXPECT_FALSE(h.quiet());
  // Declines for the data and small ones in turn: the run of small ones starts over, the count
  // does not.
  OfferGate k = opened();
  for (uint32_t i = 0; i + 1 < OfferGate::kQuietAfter; ++i)
    declined(&k, 1, i % 2 == 0 ? RawWhy::kDeclined : RawWhy::kSmall);
  EXPECT_FALSE(k.quiet());
  declined(&k, 1, RawWhy::kSmall);
  EXPECT_TRUE(k.quiet());
  EXPECT_EQ(post(&k, 10 * OfferGate::kProbeEvery), 10) << "declined for more than size too: probes";
}

// A message declined for more than its size, arriving into offered staging while the gate is
// quiet over small ones (it was offered before the quiet: NCCL posts up to 8 receives at once),
// starts the probes.
TEST(OfferGate, ADeclineInAQuietOverSmallMessagesStartsProbes) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfterSmall, RawWhy::kSmall);
  ASSERT_TRUE(g.quiet());
  EXPECT_EQ(post(&g, 3 * OfferGate::kProbeEvery), 0);
  declined(&g, 1, RawWhy::kDeclined);
  EXPECT_EQ(post(&g, 10 * OfferGate::kProbeEvery), 10);
}

TEST(OfferGate, ACompressedArrivalEndsTheQuietAndTheCount) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfter, RawWhy::kDeclined);
  ASSERT_TRUE(g.quiet());
  compressed(&g);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 50), 50);
  // The count starts over: a run of declines one short of the limit keeps the offers.
  declined(&g, OfferGate::kQuietAfter - 1, RawWhy::kDeclined);
  EXPECT_FALSE(g.quiet());
  compressed(&g);
  declined(&g, OfferGate::kQuietAfter - 1, RawWhy::kDeclined);
  EXPECT_FALSE(g.quiet());
}

// Quiet over small collectives only: a large collective's first message, which its sender would
// compress, arriving unoffered, asks again at once rather than at the next probe; after a decline
// for more than size it does not.
TEST(OfferGate, AWantedArrivalEndsAQuietOverSmallMessages) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfter, RawWhy::kSmall);
  ASSERT_TRUE(g.quiet());
  g.arrived(false, false, RawWhy::kSmall);
  EXPECT_TRUE(g.quiet()) << "another small one";
  g.arrived(false, false, RawWhy::kDeclined);
  EXPECT_TRUE(g.quiet()) << "one the sender would not compress";
  wanted(&g);
  EXPECT_FALSE(g.quiet());
  EXPECT_EQ(post(&g, 50), 50);
  EXPECT_TRUE(g.expecting()) << "its sender would have compressed it";

  OfferGate h = opened();
  declined(&h, 1, RawWhy::kDeclined);
  declined(&h, OfferGate::kQuietAfter - 1, RawWhy::kSmall);
  ASSERT_TRUE(h.quiet());
  for (int i = 0; i < 100; ++i) wanted(&h);
  EXPECT_TRUE(h.quiet()) << "the sender declined one for more than size: only a probe or a compressed arrival asks again";
  compressed(&h);
  EXPECT_FALSE(h.quiet());
  declined(&h, OfferGate::kQuietAfter, RawWhy::kSmall);
  ASSERT_TRUE(h.quiet());
  wanted(&h);
  EXPECT_FALSE(h.quiet()) << "the compressed arrival cleared the declines";
}

// Small collectives between large compressed ones: the wanted arrival that ends the quiet
// expects compressed bytes again (its next receive waits for a cold kernel); not after a decline
// for more than size.
TEST(OfferGate, AWantedArrivalAfterSmallCollectivesExpectsAgain) {
  OfferGate g = opened();
  compressed(&g);
  ASSERT_TRUE(g.expecting());
  declined(&g, OfferGate::kQuietAfterSmall, RawWhy::kSmall);
  ASSERT_TRUE(g.quiet());
  EXPECT_FALSE(g.expecting()) << "quiet: no waits for the kernel";
  wanted(&g);
  EXPECT_FALSE(g.quiet());
  EXPECT_TRUE(g.expecting());

  OfferGate h = opened();
  compressed(&h);
  declined(&h, 1, RawWhy::kDeclined);  // the sender may have stopped
  declined(&h, OfferGate::kQuietAfterSmall, RawWhy::kSmall);
  ASSERT_TRUE(h.quiet());
  wanted(&h);
  EXPECT_TRUE(h.quiet()) << "after a decline for more than size only a probe or a compressed arrival asks again";
  EXPECT_FALSE(h.expecting());
  compressed(&h);
  EXPECT_TRUE(h.expecting());
}

// A collective of one batch of receives per connection and call, each call starting with the
// kernel stopped (an application's synchronize waits for its idle exit): every receive finds it
// cold and offers nothing. The sender's word that it would have compressed them makes the next
// batch's first receive wait for the kernel, or no call would ever come compressed.
TEST(OfferGate, ReceivesThatFoundTheKernelColdMakeTheNextBatchWait) {
  OfferGate g;
  for (int i = 0; i < 8; ++i) {
    ASSERT_FALSE(g.expecting());
    g.posted(false);  // the gate is quiet, or the kernel cold: no offer
  }
  for (int i = 0; i < 8; ++i) wanted(&g);
  EXPECT_FALSE(g.quiet());
  EXPECT_TRUE(g.expecting()) << "the next batch waits for the kernel";
  EXPECT_TRUE(g.offer());
}

// NCCL calls irecv again when one returns no request (a cold kernel's wait): the probe's answer
// holds until that receive is posted, and past receives that could not offer (no lease: the
// kernel was stopped) until one does.
TEST(OfferGate, AProbeHoldsUntilAReceiveMakesIt) {
  OfferGate g = opened();
  declined(&g, OfferGate::kQuietAfter, RawWhy::kDeclined);
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

// A probe whose message was pushed before its sender saw the offer (unseen) was not made: once a
// message comes that was not pushed (the sender follows the receives' records again), the next
// receive makes it, and the receives posted since do not count toward the next one.
TEST(OfferGate, AProbeItsSenderPushedPastIsMadeAgain) {
  OfferGate g;
  ASSERT_NO_FATAL_FAILURE(probe_out(&g));
  g.unseen();
  EXPECT_FALSE(g.offer()) << "not while the sender pushes past";
  EXPECT_FALSE(g.pushable()) << "the receives after it make the sender follow again";
  g.followed();
  EXPECT_TRUE(g.offer()) << "due again";
  EXPECT_FALSE(g.pushable());
  g.posted(true);
  EXPECT_TRUE(g.pushable()) << "made: the receives after it may be pushed past";
  g.arrived(true, false, RawWhy::kDeclined);  // the second one answered
  g.unseen();                                 // a later pushed arrival: no probe out
  g.followed();
  EXPECT_EQ(post(&g, int(OfferGate::kProbeEvery) - 1), 0);
  EXPECT_TRUE(g.offer());

  OfferGate open = opened();
  open.unseen();  // nothing to make again while every receive offers
  open.followed();
  EXPECT_TRUE(open.offer());
  EXPECT_FALSE(open.quiet());
}

// A probe answered by a message that says nothing of the data, too small to code (kSmall) or its
// sender's kernel not running (kWanted into offered staging), is made again by the next receive, up
// to kQuietAfterSmall such answers in a row (a run of small collectives, a kernel that does not
// start), then the next kProbeEvery receives on.
TEST(OfferGate, AProbeThatSaysNothingOfTheDataIsMadeAgain) {
  for (const RawWhy blank : {RawWhy::kSmall, RawWhy::kWanted}) {
    SCOPED_TRACE(int(blank));
    OfferGate g;
    ASSERT_NO_FATAL_FAILURE(probe_out(&g));
    g.arrived(true, false, blank);
    EXPECT_TRUE(g.quiet());
    EXPECT_TRUE(g.offer()) << "due again at once";
    EXPECT_TRUE(g.probing());
    // Answered so kQuietAfterSmall times in a row: the period again.
    for (uint32_t i = 1; i < OfferGate::kQuietAfterSmall; ++i) {
      ASSERT_TRUE(g.offer()) << "answer " << i;
      g.posted(true);
      g.arrived(true, false, blank);
    }
    EXPECT_FALSE(g.offer());
    EXPECT_EQ(post(&g, int(OfferGate::kProbeEvery) - 1), 0);
    EXPECT_TRUE(g.offer());
    // An answer for the data starts the count over; one that declines it leaves the period as it is.
    g.posted(true);
    g.arrived(true, false, RawWhy::kDeclined);
    EXPECT_EQ(post(&g, int(OfferGate::kProbeEvery)), 1);
    g.arrived(true, false, blank);
    EXPECT_TRUE(g.offer()) << "the count started over";
    // Either kind counts toward the same bound.
    g.posted(true);
    g.arrived(true, false, blank == RawWhy::kSmall ? RawWhy::kWanted : RawWhy::kSmall);
    EXPECT_TRUE(g.offer());
  }
}

// Collectives of 8 receives (NCCL's batch) whose last message is short, the probe landing on it:
// the next batch's first receive makes it again, and compression comes back. Probing every
// kProbeEvery (a multiple of 8) receives only, every probe would land on a short message.
TEST(OfferGate, AProbeOnACollectivesShortLastMessageIsMadeAgain) {
  OfferGate h = opened();
  declined(&h, OfferGate::kQuietAfter, RawWhy::kDeclined);
  ASSERT_TRUE(h.quiet());
  bool back = false;
  for (int batch = 0; batch < 64 && !back; ++batch) {
    bool offers[8];
    for (bool& o : offers) {
      o = h.offer();
      h.posted(o);
    }
    for (int i = 0; i < 8 && !back; ++i) {
      if (!offers[i]) {
        wanted(&h);  // unoffered: the sender would have compressed it
      } else if (i == 7) {
        h.arrived(true, false, RawWhy::kSmall);
      } else {
        compressed(&h);
        back = true;
      }
    }
  }
  EXPECT_TRUE(back) << "every probe landed on a collective's short last message";
  EXPECT_FALSE(h.quiet());
}

// A quiet gate's due probe is worth a cold kernel's wait too: probing() says when the next
// receive is one, until a receive makes it.
TEST(OfferGate, ProbingWhileAProbeIsDue) {
  OfferGate g = opened();
  EXPECT_FALSE(g.probing()) << "open: every receive offers, none is a probe";
  declined(&g, OfferGate::kQuietAfter, RawWhy::kDeclined);
  ASSERT_TRUE(g.quiet());
  for (uint32_t i = 1; i < OfferGate::kProbeEvery; ++i) {
    EXPECT_FALSE(g.probing());
    g.posted(false);
  }
  EXPECT_TRUE(g.probing());
  g.posted(false);  // the kernel was stopped: still due
  EXPECT_TRUE(g.probing());
  g.posted(true);
  EXPECT_FALSE(g.probing());

  OfferGate small = opened();
  declined(&small, OfferGate::kQuietAfterSmall, RawWhy::kSmall);
  ASSERT_TRUE(small.quiet());
  for (uint32_t i = 0; i < 2 * OfferGate::kProbeEvery; ++i) {
    EXPECT_FALSE(small.probing()) << "quiet over small messages: no probes";
    small.posted(false);
  }
}

// A cold kernel is worth waiting for only while the sender compresses or would: not before its
// first wanted message, nor after a decline for more than size, nor once the gate is quiet; a
// collective's short last message or a wanted arrival into offered staging (the sender's own
// kernel was stopped) leaves it as it was.
TEST(OfferGate, ExpectsCompressedBytesOnlyWhileTheSenderCompresses) {
  OfferGate g;
  EXPECT_FALSE(g.expecting());
  wanted(&g);
  EXPECT_TRUE(g.expecting());
  declined(&g, 1, RawWhy::kSmall);
  g.arrived(true, false, RawWhy::kWanted);
  EXPECT_TRUE(g.expecting());
  declined(&g, 1, RawWhy::kDeclined);
  EXPECT_FALSE(g.expecting());
  g.arrived(true, false, RawWhy::kWanted);
  EXPECT_FALSE(g.expecting()) << "offered: the sender's kernel, not its policy";
  wanted(&g);
  EXPECT_TRUE(g.expecting()) << "the sender would compress again";
  declined(&g, 1, RawWhy::kDeclined);
  compressed(&g);
  EXPECT_TRUE(g.expecting());
  declined(&g, OfferGate::kQuietAfter, RawWhy::kSmall);
  ASSERT_TRUE(g.quiet());
  EXPECT_FALSE(g.expecting());
}

// Random receives and arrivals, as recv_comm.cc drives the gate (the kernel sometimes stopped, some
// messages pushed past their receive), against what its users rely on: a quiet gate that probes
// does so at least once every kProbeEvery receives; a receive it lets the sender push past, and as
// many after it as push_ahead() says, are no probes; a compressed arrival opens it; a quiet gate
// expects nothing.
TEST(OfferGate, RandomEventsKeepItsPromises) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    auto chance = [&](uint32_t percent) { return rng() % 100 < percent; };
    OfferGate g;
    struct Posted {
      bool offered, pushable;
    };
    std::deque<Posted> out;  // posted, their messages not arrived yet
    bool probes_on = false;  // a probe was due since the gate went quiet
    uint32_t gap = 0;        // receives since it last offered, while probes_on
    const uint32_t compressed_pct = 1 + seed % 5;
    int probes = 0, bounded_pushes = 0, reopened = 0;  // the run reached what it checks
    for (int step = 0; step < 100000; ++step) {
      ASSERT_FALSE(g.quiet() && g.expecting()) << "step " << step;
      if (out.size() < 8 && (out.empty() || chance(50))) {  // NCCL keeps up to 8 receives in flight
        if (!g.quiet()) probes_on = false;
        probes_on |= g.probing();
        const bool pushable = g.pushable();
        if (pushable) {
          const uint32_t k = g.push_ahead();
          bounded_pushes += k != kPushAny;
          OfferGate h = g;  // the receives the sender may push past, with nothing arriving meanwhile
          for (uint32_t i = 0; i <= std::min<uint32_t>(k, 2 * OfferGate::kProbeEvery); ++i) {
            ASSERT_FALSE(h.offer()) << "step " << step << ": receive " << i << " of " << k << " pushed past is a probe";
            h.posted(false);
          }
        }
        const bool o = g.offer();
        probes += o && g.quiet();
        if (o) {
          gap = 0;
        } else if (probes_on) {
          ASSERT_LT(++gap, OfferGate::kProbeEvery) << "step " << step << ": a quiet gate that stopped probing";
        }
        const bool offered = o && chance(80);  // else the kernel was stopped
        g.posted(offered);
        out.push_back({offered, pushable});
        continue;
      }
      const Posted r = out.front();
      out.pop_front();
      const bool pushed = r.pushable && chance(70);
      bool compressed = false;
      RawWhy why = RawWhy::kUnsaid;
      if (r.offered && !pushed && chance(compressed_pct)) {
        compressed = true;
      } else {
        const uint32_t x = rng() % 10;
        why = x < 3 ? RawWhy::kSmall : x < 8 ? RawWhy::kDeclined : RawWhy::kWanted;
      }
      const bool quiet_before = g.quiet();
      if (pushed && r.offered) g.unseen();
      if (!pushed) g.followed();
      g.arrived(r.offered && !pushed, compressed, why);
      if (compressed) {
        reopened += quiet_before;
        ASSERT_FALSE(g.quiet()) << "step " << step;
        ASSERT_TRUE(g.offer()) << "step " << step;
      }
    }
    EXPECT_GT(probes, 100);
    EXPECT_GT(bounded_pushes, 100);
    EXPECT_GT(reopened, 10);
  }
}

}  // namespace
}  // namespace zipccl
