// The tuner's exported tables through the real .so, as NCCL finds them in the net plugin's
// library: every version's name, init, getCollInfo and finalize; a communicator on one node (no
// network to compress) keeps NCCL's table and choices. The model itself: tests/tuner.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "net_client.h"
#include "pair.h"
#include "tuner_abi.h"

using namespace zipccl::client;
using namespace zipccl::test;
using namespace zipccl::tuner;

namespace {

// As NCCL hands it over: its float[algo][proto] array cast to float** (enqueue.cc).
struct CostTable {
  float rows[7][3];
  float** ptr() { return reinterpret_cast<float**>(rows); }
  CostTable() {
    for (int a = 0; a < 7; ++a)
      for (int p = 0; p < 3; ++p) rows[a][p] = float(10 * a + p + 1);
  }
  bool same(const CostTable& o) const { return std::memcmp(rows, o.rows, sizeof rows) == 0; }
};

TEST(TunerAbi, EveryVersionAndOneNodeKeepsNcclsChoice) {
  PluginNet net(ZIP_PLUGIN_PATH, 11);  // NCCL initialises its net plugin first
  ASSERT_EQ(net.init(), ncclSuccess);
  void* lib = dlopen(ZIP_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  const CostTable before;
  int nch = 0;

  auto* v5 = static_cast<ncclTuner_v5_t*>(dlsym(lib, "ncclTunerPlugin_v5"));
  ASSERT_NE(v5, nullptr);
  EXPECT_STREQ(v5->name, "Zip");
  void* ctx = nullptr;
  ASSERT_EQ(v5->init(&ctx, 0x5eed, 8, 1, nullptr, nullptr, nullptr), ncclSuccess);
  CostTable t;
  for (int f : {kAllGather, kReduceScatter, kAllReduce, kBroadcast})
    ASSERT_EQ(v5->getCollInfo(ctx, f, size_t(1) << 28, 1, t.ptr(), 7, 3, 0, &nch), ncclSuccess);
  EXPECT_TRUE(t.same(before)) << "one node: the table is NCCL's";
  EXPECT_EQ(v5->finalize(ctx), ncclSuccess);

  auto* v4 = static_cast<ncclTuner_v4_t*>(dlsym(lib, "ncclTunerPlugin_v4"));
  auto* v3 = static_cast<ncclTuner_v3_t*>(dlsym(lib, "ncclTunerPlugin_v3"));
  auto* v2 = static_cast<ncclTuner_v2_t*>(dlsym(lib, "ncclTunerPlugin_v2"));
  ASSERT_TRUE(v4 && v3 && v2);
  ASSERT_EQ(v4->init(8, 1, nullptr, &ctx), ncclSuccess);
  ASSERT_EQ(v4->getCollInfo(ctx, kAllGather, size_t(1) << 28, 1, t.ptr(), 7, 3, 1, &nch), ncclSuccess);
  EXPECT_EQ(v4->destroy(ctx), ncclSuccess);
  ASSERT_EQ(v3->init(8, 1, nullptr, &ctx), ncclSuccess);
  ASSERT_EQ(v3->getCollInfo(ctx, kAllGather, size_t(1) << 28, 1, t.ptr(), 7, 3, &nch), ncclSuccess);
  EXPECT_EQ(v3->destroy(ctx), ncclSuccess);
  EXPECT_TRUE(t.same(before));
  ASSERT_EQ(v2->init(8, 1, nullptr, &ctx), ncclSuccess);
  int algo = -1, proto = -1;
  ASSERT_EQ(v2->getCollInfo(ctx, kAllGather, size_t(1) << 28, 0, 0, 1, &algo, &proto, &nch), ncclSuccess);
  EXPECT_EQ(algo, -1) << "v2: NCCL's choice stands";
  EXPECT_EQ(proto, -1);
  EXPECT_EQ(v2->destroy(ctx), ncclSuccess);
  dlclose(lib);
  EXPECT_EQ(net.finalize(), ncclSuccess);
}

// NCCL_ZIP_TUNER_FILE's first matching line is NCCL's pick with its channels; NCCL_ZIP_TUNER=0
// leaves the table and channels alone (zip_peer tune: a 2-node communicator, all_gather of 1 MiB),
// and so does libnccl-tuner-zip.so without overrides.
TEST(TunerAbi, OverridesAndTheOffSwitch) {
  char path[] = "/tmp/zip_tuner_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string csv = "# ours\nallreduce,0,4294967295,ring,ll,-1,-1,-1\nallgather,0,4294967295,tree,simple,3,2,-1\n";
  ASSERT_EQ(write(fd, csv.data(), csv.size()), ssize_t(csv.size()));
  close(fd);
  // The tables in the net plugin's library, and alone in libnccl-tuner-zip.so (beside any net
  // plugin: overrides only).
  const struct {
    Env env;
    const char* tuner;
    double tree, ring;
    long channels;
  } cases[] = {
      {{{"NCCL_ZIP_TUNER_FILE", path}}, ZIP_PLUGIN_PATH, 0, 100, 3},
      {{{"NCCL_ZIP_TUNER_FILE", path}, {"NCCL_ZIP_TUNER", "0"}}, ZIP_PLUGIN_PATH, 100, 100, 0},
      {{{"NCCL_ZIP_TUNER_FILE", path}}, ZIP_TUNER_PATH, 0, 100, 3},
      {{}, ZIP_TUNER_PATH, 100, 100, 0},
  };
  for (const auto& c : cases) {
    Env env = c.env;
    env["NCCL_SOCKET_IFNAME"] = "lo";
    Proc p({ZIP_PEER_PATH, "tune", std::string("--plugin=") + ZIP_PLUGIN_PATH, std::string("--tuner=") + c.tuner},
           env);
    ASSERT_EQ(p.wait(30), 0);
    const std::string r = result_line(p);
    EXPECT_EQ(field(r, "ok"), 1) << r;
    EXPECT_NE(r.find(" tree_simple=" + std::to_string(int(c.tree)) + " "), std::string::npos) << r;
    EXPECT_NE(r.find(" ring_simple=" + std::to_string(int(c.ring)) + " "), std::string::npos) << r;
    EXPECT_EQ(field(r, "channels"), c.channels) << r;
  }
  unlink(path);
}

// Every rank must pick alike, so the tuner plans from the configuration, not from what this
// rank's traffic did: after bf16 traffic and after random bytes (which the net plugin sends raw)
// its all_gather of 64 MiB takes the same compressed ring (NCCL's estimates: the wire time at 100
// Mb/s, NCCL_ZIP_LINK_MBPS, which the codec outruns); NCCL_ZIP_TUNER_RATIO_PCT=100 (nothing to
// gain) leaves NCCL's table, and so does lo's speed where it is a guess (NCCL_ZIP_LINK_MBPS=0:
// the device's; the comms compress nothing there until they have measured the link).
TEST(TunerAbi, EveryRankPlansFromTheConfigurationAlone) {
  const double wire_us = 32.0 * (1 << 20) / 12.5e6 * 1e6;  // half of 64 MiB at 12.5 MB/s
  const std::string us = std::to_string(long(wire_us));
  const struct {
    const char* kind;
    const char* ratio_pct;
    const char* link_mbps;
  } cases[] = {{"bf16", "70", "100"}, {"random", "70", "100"}, {"bf16", "100", "100"}, {"bf16", "70", "0"}};
  long tuned_at_70 = -1;
  for (const auto& c : cases) {
    const Env env = {{"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_ZIP_LINK_MBPS", c.link_mbps}, {"NCCL_ZIP_ENABLE", "1"},
                     {"NCCL_ZIP_TUNER_RATIO_PCT", c.ratio_pct}};
    const Pair p = run_pair(11, env, {"--msgs=40", std::string("--kind=") + c.kind},
                            {"--msgs=40", std::string("--kind=") + c.kind, "--tune-after=" + us});
    expect_ok(p);
    const long tuned = field(p.send_result, "tuned");
    const std::string what =
        std::string(c.kind) + " at " + c.ratio_pct + "%, link " + c.link_mbps + " Mb/s: " + p.send_result;
    const bool guessed_link = std::string(c.link_mbps) == "0";
    if (std::string(c.kind) == "random") {
      EXPECT_EQ(field(p.send_result, "compressed"), 0) << what;
    } else if (!guessed_link) {
      EXPECT_GT(field(p.send_result, "compressed"), 0) << what;
    }
    if (std::string(c.ratio_pct) == "100" || guessed_link) {
      EXPECT_EQ(tuned, long(float(wire_us))) << "NCCL's own; " << what;
    } else {
      EXPECT_LT(tuned, long(wire_us * 0.8)) << "the compressed ring's estimate; " << what;
      if (tuned_at_70 >= 0) {
        EXPECT_EQ(tuned, tuned_at_70) << "the same pick whatever the traffic; " << what;
      }
      tuned_at_70 = tuned;
    }
  }
}

}  // namespace
