// The tuner's model on synthetic paths and NCCL-like cost tables: a slow link with a fast codec
// takes the compressed ring, a fast link, incompressible data, small sizes, one node or an
// unmeasured codec keep NCCL's choice, and only the ring collectives are considered.
#include "cost_model.h"

#include <gtest/gtest.h>

#include "tuner_abi.h"

namespace zipccl::tuner {
namespace {

constexpr double kMiB = 1 << 20;

// NCCL-like estimates for 2 ranks on a link of link_bps: LL and LL128 slow for big sizes,
// Simple close to the wire time, tree and PAT where they apply.
struct Table {
  float rows[7][3];
  const float* ptr() const { return &rows[0][0]; }
  Table(double nbytes, double link_bps, int func) {
    for (auto& row : rows)
      for (float& x : row) x = kIgnore;
    const double sent_us = nbytes / 2 * (func == kAllReduce ? 2 : 1) / link_bps * 1e6;
    rows[kAlgoRing][kProtoLL] = float(20 + sent_us * 4);
    rows[kAlgoRing][kProtoLL128] = float(25 + sent_us * 1.3);
    rows[kAlgoRing][kProtoSimple] = float(60 + sent_us);
    if (func == kAllReduce) rows[kAlgoTree][kProtoSimple] = float(70 + sent_us * 1.1);
  }
};

Path path(double link_bps, double codec_bps, double ratio, int nodes = 2) {
  Path p;
  p.nranks = 2;
  p.nnodes = nodes;
  p.enabled = true;
  p.link_bps = link_bps;
  p.codec_bps = codec_bps;
  p.ratio = ratio;
  p.codec_keeps_up = true;
  return p;
}

TEST(CostModel, SlowLinkFastCodecCompresses) {
  for (int func : {kAllGather, kReduceScatter, kAllReduce}) {
    Table t(256 * kMiB, 4e9, func);
    const Choice c = choose(func, size_t(256 * kMiB), t.ptr(), 7, 3, path(4e9, 40e9, 0.7));
    EXPECT_TRUE(c.compressed) << func;
    EXPECT_LT(c.compressed_us, c.native_us / 1.3) << "ratio 0.7 on a slow link: about 1/0.7 faster";
    EXPECT_GT(c.compressed_us, c.native_us * 0.7 * 0.95) << "never better than the ratio";
  }
}

TEST(CostModel, FastLinkOrSlowCodecStaysNative) {
  Table t(256 * kMiB, 50e9, kAllGather);
  EXPECT_FALSE(choose(kAllGather, size_t(256 * kMiB), t.ptr(), 7, 3, path(50e9, 20e9, 0.7)).compressed)
      << "a codec slower than the link";
  Table u(256 * kMiB, 4e9, kAllGather);
  EXPECT_FALSE(choose(kAllGather, size_t(256 * kMiB), u.ptr(), 7, 3, path(4e9, 3e9, 0.7)).compressed)
      << "a codec slower than the link, slow link";
}

TEST(CostModel, IncompressibleDataStaysNative) {
  Table t(256 * kMiB, 4e9, kAllGather);
  EXPECT_FALSE(choose(kAllGather, size_t(256 * kMiB), t.ptr(), 7, 3, path(4e9, 40e9, 0.99)).compressed);
}

TEST(CostModel, SmallSizesStayNative) {
  for (double bytes : {4096.0, 65536.0, 256 * 1024.0}) {
    Table t(bytes, 4e9, kAllGather);
    const Choice c = choose(kAllGather, size_t(bytes), t.ptr(), 7, 3, path(4e9, 40e9, 0.7));
    EXPECT_FALSE(c.compressed) << bytes << ": LL wins where latency dominates";
  }
}

TEST(CostModel, WhereItDoesNotApply) {
  Table t(256 * kMiB, 4e9, kAllGather);
  const size_t n = size_t(256 * kMiB);
  EXPECT_FALSE(choose(kAllGather, n, t.ptr(), 7, 3, path(4e9, 40e9, 0.7, 1)).compressed) << "one node";
  EXPECT_FALSE(choose(kAllGather, n, t.ptr(), 7, 3, path(4e9, 0, 0.7)).compressed) << "codec unmeasured";
  Path off = path(4e9, 40e9, 0.7);
  off.enabled = false;
  EXPECT_FALSE(choose(kAllGather, n, t.ptr(), 7, 3, off).compressed) << "NCCL_ZIP_ENABLE=0";
  Path raw = path(4e9, 40e9, 0.7);
  raw.codec_keeps_up = false;
  EXPECT_FALSE(choose(kAllGather, n, t.ptr(), 7, 3, raw).compressed) << "the net plugin's send comms would not compress";
  t.rows[kAlgoRing][kProtoSimple] = kIgnore;
  EXPECT_FALSE(choose(kAllGather, n, t.ptr(), 7, 3, path(4e9, 40e9, 0.7)).compressed) << "no Simple ring";
  EXPECT_FALSE(choose(kAllGather, n, t.ptr(), 1, 3, path(4e9, 40e9, 0.7)).compressed) << "a table without rings";
}

// Every Simple entry is compressed alike: the one that gains most wins, here PAT for a
// reduce_scatter whose PAT estimate NCCL puts below its ring's, and the tree for an all_reduce.
TEST(CostModel, TheBestCompressedAlgorithmWins) {
  const size_t n = size_t(256 * kMiB);
  Table rs(256 * kMiB, 4e9, kReduceScatter);
  rs.rows[kAlgoPat][kProtoSimple] = rs.rows[kAlgoRing][kProtoSimple] * 0.9f;
  const Choice c = choose(kReduceScatter, n, rs.ptr(), 7, 3, path(4e9, 40e9, 0.7));
  EXPECT_TRUE(c.compressed);
  EXPECT_EQ(c.algo, kAlgoPat);
  Table ar(256 * kMiB, 4e9, kAllReduce);
  ar.rows[kAlgoTree][kProtoSimple] = ar.rows[kAlgoRing][kProtoSimple] * 0.8f;
  EXPECT_EQ(choose(kAllReduce, n, ar.ptr(), 7, 3, path(4e9, 40e9, 0.7)).algo, kAlgoTree);
  Table ag(256 * kMiB, 4e9, kAllGather);
  EXPECT_EQ(choose(kAllGather, n, ag.ptr(), 7, 3, path(4e9, 40e9, 0.7)).algo, kAlgoRing) << "only the ring applies";
}

// Broadcast and reduce move the whole buffer through every rank: compressed on a slow link too.
TEST(CostModel, BroadcastAndReduceCompressOnASlowLink) {
  for (int func : {kBroadcast, kReduce}) {
    Table t(256 * kMiB, 4e9, kAllGather);  // its rows as an all_gather's: ring entries only
    const double wire_us = 256 * kMiB / 4e9 * 1e6;
    t.rows[kAlgoRing][kProtoSimple] = float(60 + wire_us);
    t.rows[kAlgoRing][kProtoLL128] = float(25 + wire_us * 1.3);
    t.rows[kAlgoRing][kProtoLL] = float(20 + wire_us * 4);
    const Choice c = choose(func, size_t(256 * kMiB), t.ptr(), 7, 3, path(4e9, 40e9, 0.7));
    EXPECT_TRUE(c.compressed) << func;
    EXPECT_LT(c.compressed_us, c.native_us * 0.8) << func;
  }
}

TEST(CostModel, NativeIsNcclsCheapestEntry) {
  Table t(64 * kMiB, 4e9, kAllReduce);
  t.rows[kAlgoTree][kProtoSimple] = 1;  // NCCL's tree is far cheaper than anything compression gives
  const Choice c = choose(kAllReduce, size_t(64 * kMiB), t.ptr(), 7, 3, path(4e9, 40e9, 0.7));
  EXPECT_EQ(c.native_us, 1.0f);
  EXPECT_FALSE(c.compressed);
}

}  // namespace
}  // namespace zipccl::tuner
