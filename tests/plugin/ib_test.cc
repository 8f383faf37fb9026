// The verbs transport through the real plugin over the emulated libibverbs (tests/verbs/emu):
// transport selection, NCCL_IB_HCA, RoCE, several QPs per connection, injected faults. These run
// in the ib. copy of plugin_tests (NCCL_ZIP_TRANSPORT=ib), which also runs every transport-neutral
// test of plugin_test.cc over the verbs transport; elsewhere they are skipped.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "emu_harness.h"
#include "fake_verbs_peer.h"
#include "ib_wire.h"
#include "net_client.h"  // ncclResult_t
#include "pair.h"

using namespace zipccl::client;
using namespace zipccl::test;

namespace {

#define IB_ONLY() \
  if (!ib_run()) GTEST_SKIP() << "runs in the ib. copy of the suite (over the emulated libibverbs)"

std::string devs_of(const std::string& result) {
  const size_t p = result.find(" devs=");
  return p == std::string::npos ? "" : result.substr(p + 6);
}

bool logged(const std::vector<std::string>& log, const std::string& needle) {
  for (const auto& l : log)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

// ---- Which transport init picks ---------------------------------------------------------------

TEST(IbSelect, AutoUsesTheRdmaDevice) {
  IB_ONLY();
  const std::string r = probe(Env{{"NCCL_ZIP_TRANSPORT", "auto"}});
  EXPECT_EQ(field(r, "ok"), 1) << r;
  EXPECT_EQ(devs_of(r), "emu_0:1") << r;
}

// NCCL_IB_PCI_RELAXED_ORDERING: on by default where the library has ibv_reg_mr_iova2 (the
// emulation does), off with 0; the transport's init line says so.
TEST(IbSelect, RelaxedOrderingByDefault) {
  IB_ONLY();
  for (const char* mode : {"", "0", "1"}) {
    std::vector<std::string> log;
    Env env;
    if (*mode) env["NCCL_IB_PCI_RELAXED_ORDERING"] = mode;
    const std::string r = probe(env, &log);
    ASSERT_EQ(field(r, "ok"), 1) << r;
    EXPECT_EQ(logged(log, ", relaxed ordering,"), std::string(mode) != "0") << "NCCL_IB_PCI_RELAXED_ORDERING=" << mode;
  }
}

TEST(IbSelect, AutoFallsBackToSocketsWithoutLibibverbs) {
  IB_ONLY();
  std::vector<std::string> log;
  const std::string r = probe(
      Env{{"NCCL_ZIP_TRANSPORT", "auto"}, {"NCCL_ZIP_IBVERBS_LIB", "/nonexistent/libibverbs.so.1"},
          {"NCCL_SOCKET_IFNAME", "lo"}},
      &log);
  EXPECT_EQ(field(r, "ok"), 1) << r;
  EXPECT_EQ(devs_of(r), "lo:0") << r;
  EXPECT_TRUE(logged(log, "/nonexistent/libibverbs.so.1")) << "the INFO line says why";
  EXPECT_TRUE(logged(log, "using the socket transport"));
}

TEST(IbSelect, IbWithoutLibibverbsFailsInit) {
  IB_ONLY();
  std::vector<std::string> log;
  const std::string r = probe(Env{{"NCCL_ZIP_IBVERBS_LIB", "/nonexistent/libibverbs.so.1"}}, &log);
  EXPECT_EQ(field(r, "ok"), 0) << r;
  EXPECT_TRUE(logged(log, "NCCL_ZIP_TRANSPORT=ib but no RDMA device is usable"));
}

TEST(IbSelect, IbWithoutDeviceFailsInit) {
  IB_ONLY();
  std::vector<std::string> log;
  const std::string r = probe(Env{{"NCCL_ZIP_EMU_DEVICES", ""}}, &log);
  EXPECT_EQ(field(r, "ok"), 0) << r;
  EXPECT_TRUE(logged(log, "no RDMA device found"));
}

TEST(IbSelect, DownPortsAreNotDevices) {
  IB_ONLY();
  std::vector<std::string> log;
  const std::string r = probe(Env{{"NCCL_ZIP_EMU_DEVICES", "emu_d:ib:1:down"}}, &log);
  EXPECT_EQ(field(r, "ok"), 0) << r;
  EXPECT_TRUE(logged(log, "emu_d:1 not active"));
}

TEST(IbSelect, HcaFilterPicksPorts) {
  IB_ONLY();
  struct Case {
    const char* hca;
    const char* devs;
  };
  for (const Case& c : {Case{nullptr, "emu_a:1,emu_b:1,emu_b:2"}, Case{"emu_b:2", "emu_b:2"},
                        Case{"^emu_b", "emu_a:1"}, Case{"=emu_b", "emu_b:1,emu_b:2"}, Case{"emu_a:2", ""}}) {
    Env env{{"NCCL_ZIP_EMU_DEVICES", "emu_a,emu_b:roce:2"}};
    if (c.hca) env["NCCL_IB_HCA"] = c.hca;
    const std::string r = probe(env);
    SCOPED_TRACE(c.hca ? c.hca : "(unset)");
    EXPECT_EQ(field(r, "ok"), *c.devs ? 1 : 0) << r;
    EXPECT_EQ(devs_of(r), c.devs) << r;
  }
}

// ---- Exchanges the socket suite has no twin for -------------------------------------------------

TEST(IbExchange, RoceLinkLayer) {
  IB_ONLY();
  Env env = base_env("2");
  env["NCCL_ZIP_EMU_DEVICES"] = "emu_r:roce";
  env["NCCL_IB_MTU"] = "1024";  // below the ports' 4096: both ends must agree on it
  const std::vector<std::string> args = {"--msgs=100", "--max=262144", "--kind=mix", "--seed=21"};
  expect_ok(run_pair(11, env, args, args));
}

// Parts over several QPs and 256 KiB chunks within a part; grouped receives matched by tag.
TEST(IbExchange, QpsPerConnection) {
  IB_ONLY();
  for (const char* qps : {"1", "4"}) {
    Env env = base_env("2");
    env["NCCL_IB_QPS_PER_CONNECTION"] = qps;
    SCOPED_TRACE(std::string(qps) + " QPs");
    const std::vector<std::string> big = {"--msgs=60", "--max=2097152", "--kind=bf16", "--seed=5"};
    expect_ok(run_pair(11, env, big, big));
    const std::vector<std::string> grouped = {"--msgs=60", "--max=131072", "--group=4", "--kind=mix", "--seed=6"};
    expect_ok(run_pair(9, env, grouped, grouped));
  }
}

// NCCL's per-communicator traffic class (v10 connect config, v11 init config) overrides
// NCCL_IB_TC on the connector's queue pairs, and the listener adopts it; v9 has no config.
TEST(IbExchange, TrafficClassPerCommunicator) {
  IB_ONLY();
  Env env = base_env("0");
  env["NCCL_IB_TC"] = "32";
  const std::vector<std::string> args = {"--msgs=20", "--max=65536", "--kind=mix", "--seed=2"};
  for (int v : {9, 10, 11}) {
    for (const char* tc : {"", "96"}) {
      SCOPED_TRACE("v" + std::to_string(v) + " tc " + tc);
      auto send_args = args;
      if (*tc) send_args.push_back(std::string("--tc=") + tc);
      Pair p = run_pair(v, env, args, send_args);
      expect_ok(p);
      const long want = *tc && v >= 10 ? 96 : 32;
      EXPECT_EQ(field(p.send_result, "tclass"), want) << p.send_result;
      EXPECT_EQ(field(p.recv_result, "tclass"), want) << p.recv_result;
      // Small control records and mailbox writes go inline (the emulation grants 64 bytes).
      EXPECT_EQ(field(p.send_result, "inline"), 64) << p.send_result;
    }
  }
}

TEST(IbExchange, DelayedWorkRequestsStayExact) {
  IB_ONLY();
  Env env = base_env("2");
  env["NCCL_ZIP_EMU_FAULT"] = "delay_us:300";
  env["NCCL_IB_QPS_PER_CONNECTION"] = "2";
  const std::vector<std::string> args = {"--msgs=80", "--max=524288", "--kind=mix", "--seed=13"};
  expect_ok(run_pair(11, env, args, args));
}

// NCCL net_ib's economy: a receive costs the receiver one RDMA write (its clear-to-send, for all
// its grouped messages), and a message costs the sender only its data writes, the last carrying
// the header in its immediate. Counted by the emulated HCA over both processes (NCCL_ZIP_EMU_STATS).
TEST(IbExchange, OneControlWritePerReceive) {
  IB_ONLY();
  struct Case {
    int group;
    long msgs;  // receives; each of `group` messages
  };
  for (const Case& c : {Case{1, 200}, Case{4, 60}}) {
    const std::string stats = "/tmp/zipccl-wr-" + std::to_string(getpid()) + "-" + std::to_string(c.group);
    std::remove(stats.c_str());
    Env env = base_env("2");
    env["NCCL_ZIP_EMU_STATS"] = stats;
    // Messages of at most one 256 KiB chunk on one QP: one data write each.
    const std::vector<std::string> args = {"--msgs=" + std::to_string(c.msgs), "--max=262144",
                                           "--group=" + std::to_string(c.group), "--kind=mix", "--seed=4"};
    Pair p = run_pair(11, env, args, args);
    SCOPED_TRACE("group " + std::to_string(c.group));
    expect_ok(p);
    long sends = 0, writes = 0, writes_imm = 0, reads = 0, lines = 0;
    std::ifstream f(stats);
    for (std::string l; std::getline(f, l); ++lines) {
      sends += field(l, "sends");
      writes += field(l, "writes");
      writes_imm += field(l, "writes_imm");
      reads += field(l, "reads");
    }
    std::remove(stats.c_str());
    ASSERT_EQ(lines, 2) << "one line per queue pair: one per link";
    EXPECT_EQ(sends, 0) << "no control message goes as a SEND";
    EXPECT_EQ(writes, c.msgs) << "one clear-to-send write per receive";
    EXPECT_EQ(writes_imm, c.msgs * c.group) << "one data write per message, carrying its header";
    EXPECT_EQ(reads, 0);
  }
}

// ---- GPUDirect RDMA ----------------------------------------------------------------------------

// ptrSupport offers DMA-BUF where the (emulated) kernel supports it, unless NCCL_ZIP_GDR or forced
// compression keeps device buffers in host staging. NCCL_PTR_CUDA would come from nvidia-peermem,
// read from the real /sys: not asserted here.
TEST(IbGdr, PtrSupportFollowsTheSettings) {
  IB_ONLY();
  struct Case {
    const char* gdr;
    const char* zip;
    const char* emu;  // NCCL_ZIP_EMU_GDR: what the emulated host supports
    bool dmabuf;
  };
  for (const Case& c : {Case{"", "1", "dmabuf", true}, Case{"", "0", "dmabuf", true}, Case{"", "2", "dmabuf", false},
                        Case{"0", "1", "dmabuf", false}, Case{"1", "2", "dmabuf", true}, Case{"", "1", "none", false},
                        Case{"1", "1", "none", false}}) {
    Env env{{"NCCL_ZIP_ENABLE", c.zip}, {"NCCL_ZIP_EMU_GDR", c.emu}};
    if (*c.gdr) env["NCCL_ZIP_GDR"] = c.gdr;
    std::vector<std::string> log;
    const std::string r = probe(env, &log);
    SCOPED_TRACE(std::string("NCCL_ZIP_GDR=") + c.gdr + " NCCL_ZIP_ENABLE=" + c.zip + " NCCL_ZIP_EMU_GDR=" + c.emu);
    EXPECT_EQ(logged(log, "NCCL_ZIP_GDR=1 ignored: no device supports GPUDirect RDMA"),
              std::string(c.gdr) == "1" && std::string(c.emu) == "none");
    ASSERT_EQ(field(r, "ok"), 1) << r;
    const long ptr = field(r, "ptr");
    EXPECT_EQ(ptr & 1, 1) << r;  // host memory always
    EXPECT_EQ((ptr & 4) != 0, c.dmabuf) << r;
    EXPECT_EQ(logged(log, "device buffers: GPUDirect RDMA"), c.dmabuf);
  }
}

// Device buffers moved by the HCA, every byte checked, receives into GPU memory flushed (iflush
// returns a request for every non-empty one). Registered by pointer (nvidia-peermem) or by a
// DMA-BUF fd, between device and host memory both ways. Raw without the GPU codec
// (NCCL_ZIP_GPU=0); with it, compressed through device staging by the resident kernel.
struct GdrCase {
  const char* name;
  bool send_device, recv_device, dmabuf;
};
class IbGdrExchange : public ::testing::TestWithParam<GdrCase> {
 protected:
  Pair run(const char* gpu) {
    const GdrCase c = GetParam();
    Env env = base_env("2");
    env["NCCL_ZIP_GDR"] = "1";
    env["NCCL_ZIP_GPU"] = gpu;
    // The drivers copy each message to and from the GPU between their calls, longer than the
    // default idle time: the kernel stays up between messages instead of restarting for each.
    env["NCCL_ZIP_GPU_IDLE_US"] = "1000000";
    env["NCCL_ZIP_EMU_GDR"] = c.dmabuf ? "dmabuf" : "dmabuf,peermem";
    const std::vector<std::string> args = {"--msgs=200", "--max=262144", "--kind=bf16", "--seed=17"};
    auto recv_args = args, send_args = args;
    recv_args.push_back("--flush");
    for (auto* a : {c.recv_device ? &recv_args : nullptr, c.send_device ? &send_args : nullptr}) {
      if (!a) continue;
      a->push_back("--device");
      if (c.dmabuf) a->push_back("--dmabuf");
    }
    Pair p = run_pair(11, env, recv_args, send_args);
    expect_ok(p);
    // The receiver checks that each non-empty receive into device memory was flushed, and nothing else.
    if (c.recv_device)
      EXPECT_GT(field(p.recv_result, "flushes"), 150) << p.recv_result;
    else
      EXPECT_EQ(field(p.recv_result, "flushes"), 0) << p.recv_result;
    return p;
  }
};

TEST_P(IbGdrExchange, RawEveryByteCheckedReceivesFlushed) {
  IB_ONLY();
  SKIP_WITHOUT_CUDA();
  Pair p = run("0");
  // A device sender's bytes are not reachable by the CPU codec, and a device receiver takes raw
  // bytes only.
  EXPECT_EQ(field(p.recv_result, "compressed"), 0) << p.recv_result;
}

TEST_P(IbGdrExchange, GpuCodecCompressesEveryByteChecked) {
  IB_ONLY();
  SKIP_WITHOUT_CUDA();
  Pair p = run("1");
  // Forced compression, but only under leases of a running kernel at both ends and where coding
  // pays (the smallest of the random sizes go raw): 134-135 of the 200 on an H200.
  EXPECT_GT(field(p.recv_result, "compressed"), 100) << p.recv_result;
  if (GetParam().recv_device) {  // decoded by the kernel alone
    EXPECT_EQ(field(p.recv_result, "gpu_jobs"), field(p.recv_result, "compressed")) << p.recv_result;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, IbGdrExchange,
                         ::testing::Values(GdrCase{"PeermemBoth", true, true, false},
                                           GdrCase{"DmaBufBoth", true, true, true},
                                           GdrCase{"DeviceToHost", true, false, true},
                                           GdrCase{"HostToDevice", false, true, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// The same path with no GPU: under NCCL_ZIP_GPU_EMULATE=1 a CPU thread plays the resident kernel
// and host memory announced as the GPU's (zip_peer --emulated-device, registered by DMA-BUF) plays
// device memory, so the device staging, its registration, the staging flush and the decodes that
// only the kernel may do run everywhere. Every byte checked.
class IbEmulatedGdr : public ::testing::TestWithParam<GdrCase> {};

TEST_P(IbEmulatedGdr, DeviceBuffersCodedThroughDeviceStaging) {
  IB_ONLY();
  const GdrCase c = GetParam();
  Env env = base_env("2");
  env["NCCL_ZIP_GDR"] = "1";
  env["NCCL_ZIP_GPU_EMULATE"] = "1";
  env["NCCL_ZIP_GPU_IDLE_US"] = "1000000";
  env["NCCL_ZIP_EMU_GDR"] = "dmabuf";
  const std::vector<std::string> args = {"--msgs=200", "--max=262144", "--kind=bf16", "--seed=19"};
  auto recv_args = args, send_args = args;
  recv_args.push_back("--flush");
  if (c.recv_device) recv_args.push_back("--emulated-device");
  if (c.send_device) send_args.push_back("--emulated-device");
  Pair p = run_pair(11, env, recv_args, send_args);
  expect_ok(p);
  EXPECT_GT(field(p.recv_result, "compressed"), 100) << p.recv_result;
  // Device staging is decoded by the (emulated) kernel alone; host buffers here are mapped too.
  EXPECT_EQ(field(p.recv_result, "gpu_jobs"), field(p.recv_result, "compressed")) << p.recv_result;
  if (c.recv_device)
    EXPECT_GT(field(p.recv_result, "flushes"), 150) << p.recv_result;
  else
    EXPECT_EQ(field(p.recv_result, "flushes"), 0) << p.recv_result;
}

INSTANTIATE_TEST_SUITE_P(Cases, IbEmulatedGdr,
                         ::testing::Values(GdrCase{"Both", true, true, true},
                                           GdrCase{"DeviceToHost", true, false, true},
                                           GdrCase{"HostToDevice", false, true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- Faults: both ends fail with an error, neither crashes nor hangs ------------------------------

class IbFault : public ::testing::TestWithParam<const char*> {};

TEST_P(IbFault, BothEndsReportAnError) {
  IB_ONLY();
  Env env = base_env("0");
  env["NCCL_ZIP_EMU_FAULT"] = GetParam();
  const std::vector<std::string> args = {"--msgs=100000", "--max=262144", "--kind=bf16", "--expect-error"};
  const double t0 = now_s();
  Pair p = run_pair(11, env, args, args, 60);
  EXPECT_EQ(p.recv_rc, 0) << p.recv_result;
  EXPECT_EQ(p.send_rc, 0) << p.send_result;
  EXPECT_EQ(field(p.recv_result, "ok"), 1) << p.recv_result;
  EXPECT_EQ(field(p.send_result, "ok"), 1) << p.send_result;
  for (const std::string& r : {p.recv_result, p.send_result}) {
    const long e = field(r, "error");
    EXPECT_TRUE(e == ncclRemoteError || e == ncclSystemError) << r;
  }
  EXPECT_LT(now_s() - t0, 20.0) << "the error took too long to surface";
}

INSTANTIATE_TEST_SUITE_P(Emulated, IbFault,
                         ::testing::Values("rkey:300", "retry:300", "qp_error:300", "device_lost:300"),
                         [](const auto& info) {
                           std::string n = info.param;
                           return n.substr(0, n.find(':'));
                         });

// A fatal device event (the emulated HCA dies after 40 work requests) fails the connections on
// it; a new one, made once the device is back (a new communicator after the job restarts its
// step), works: the plugin opens the device again instead of failing every connect with EIO.
TEST(IbDeviceLoss, NewConnectionsWorkOnceTheDeviceIsBack) {
  IB_ONLY();
  Env env = base_env("0");
  env["NCCL_ZIP_EMU_FAULT"] = "device_lost:40";
  Proc p(peer_args("loop", 11, {"--rounds=2", "--msgs=100", "--max=65536", "--kind=bf16"}), env);
  ASSERT_EQ(p.wait(60), 0);
  const std::string r = result_line(p);
  EXPECT_EQ(field(r, "ok"), 1) << r;
  const size_t at = r.find("errors=");
  ASSERT_NE(at, std::string::npos) << r;
  const std::string errors = r.substr(at + 7, r.find(' ', at) - at - 7);
  EXPECT_NE(errors.rfind("0,", 0), 0u) << "the first round must fail: " << r;
  EXPECT_EQ(errors.substr(errors.find(',')), ",0") << "the second round must work: " << r;
  EXPECT_EQ(field(r, "msgs"), 100) << r;
}

// A listening plugin over the emulated HCA, for fake connectors.
class IbConnect : public ::testing::Test {
 protected:
  void SetUp() override {
    IB_ONLY();
    ASSERT_EQ(net.init(), ncclSuccess);
    ASSERT_EQ(net.listen(0, handle, &lc), ncclSuccess);
  }
  void TearDown() override {
    if (!lc) return;
    EXPECT_EQ(net.close_listen(lc), ncclSuccess);
    EXPECT_EQ(net.finalize(), ncclSuccess);
  }
  PluginNet net{ZIP_PLUGIN_PATH, 11};
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
};

// A connector with the handle's nonce whose handshake fields are out of range is rejected by
// name before any of them is used (no queue pair is set up for it).
TEST_F(IbConnect, HandshakeFieldsAreChecked) {
  const auto [addr, nonce] = handle_info(handle);
  const struct {
    const char* why;
    void (*spoil)(zipccl::verbs::QpInfo*);
  } cases[] = {
      {"bad path MTU", [](zipccl::verbs::QpInfo* i) { i->mtu = 0; }},
      {"bad path MTU", [](zipccl::verbs::QpInfo* i) { i->mtu = 9; }},
      {"bad queue pair count", [](zipccl::verbs::QpInfo* i) { i->nqps = 0; }},
      {"bad queue pair count", [](zipccl::verbs::QpInfo* i) { i->nqps = 99; }},
      {"bad traffic class", [](zipccl::verbs::QpInfo* i) { i->traffic_class = 1000; }},
      {"wrong nonce", [](zipccl::verbs::QpInfo* i) { i->nonce ^= 1; }},
  };
  for (const auto& c : cases) {
    clear_log();
    zipccl::verbs::QpInfo info;
    std::memset(&info, 0, sizeof info);
    info.magic = zipccl::verbs::kInfoMagic;
    info.version = zipccl::verbs::kWireVersion;
    info.nqps = 1;
    info.nonce = nonce;
    info.link_layer = 1;
    info.mtu = 3;
    c.spoil(&info);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(send(fd, &info, sizeof info, MSG_NOSIGNAL), ssize_t(sizeof info));
    void* rc = nullptr;
    for (const double end = now_s() + 2; !rc && count_log(c.why) == 0 && now_s() < end;)
      ASSERT_EQ(net.accept(lc, &rc), ncclSuccess);
    EXPECT_EQ(rc, nullptr) << c.why;
    EXPECT_EQ(count_log(std::string("rejected connection from 127.0.0.1")), 1) << c.why;
    EXPECT_EQ(count_log(c.why), 1) << c.why;
    close(fd);
  }
}

// A listener whose NCCL never calls accept: the connector gives up after NCCL_ZIP_SOCKET_TIMEOUT_MS
// with a remote error and a WARN, instead of waiting for its answer forever.
TEST_F(IbConnect, SilentListenerTimesOut) {
  const double t0 = now_s();
  Proc send(peer_args("send", 11, {"--handle=" + handle_hex(handle, sizeof handle), "--expect-error"}),
            Env{{"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_ZIP_SOCKET_TIMEOUT_MS", "500"}});
  ASSERT_EQ(send.wait(30), 0);
  const std::string r = result_line(send);
  EXPECT_EQ(field(r, "ok"), 1) << r;
  EXPECT_EQ(field(r, "error"), ncclRemoteError) << r;
  EXPECT_NE(r.find("call=net_.connect("), std::string::npos) << r;
  EXPECT_LT(now_s() - t0, 10.0);
}

// A peer that completes the verbs handshake with queue pairs of its own on the emulated HCA (two
// per connection) and then breaks the protocol on the wire, or gives a mailbox key that is not
// its own (the receiver's clear-to-send write is refused: the receive fails once the grace for a
// departed peer is over). The receive must fail within 2 s with a remote error and a WARN that
// says what was wrong, nothing written, and the link must hold nothing for it without bound.
struct Hostile {
  const char* name;
  uint32_t qp, writes, imm;  // the peer's empty writes with immediate imm on queue pair qp
  const char* expect;
  uint32_t mailbox_key_xor = 0;  // non-zero: the false key, and no clear-to-send to answer
};

class IbHostileSender : public IbConnect, public ::testing::WithParamInterface<Hostile> {};

TEST_P(IbHostileSender, FailsTheReceive) {
  using namespace zipccl::verbs;
  const Hostile c = GetParam();
  clear_log();
  FakeVerbsPeer peer;
  peer.mailbox_key_xor = c.mailbox_key_xor;
  int fd = -1;
  void* rc = nullptr;
  ASSERT_EQ(accept_fake_sender(net, lc, handle, 2, &peer, &fd, &rc), "");
  const auto& ep = peer.ep;
  std::vector<char> rbuf(65536, 0x5A);
  void* data = rbuf.data();
  void* mh = nullptr;
  ASSERT_EQ(net.reg_mr(rc, data, rbuf.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  size_t size = rbuf.size();
  int tag = 1;
  void* req = nullptr;
  ASSERT_EQ(net.irecv(rc, 1, &data, &size, &tag, &mh, false, &req), ncclSuccess);
  ASSERT_NE(req, nullptr);
  const auto* slot = reinterpret_cast<const volatile CtsSlot*>(ep[0]->buffer());
  ncclResult_t r = ncclSuccess;
  int done = 0, n = 0;
  if (!c.mailbox_key_xor) {
    for (const double end = now_s() + 5; slot->stamp != 1 && now_s() < end;) ASSERT_EQ(net.test(req, &done, &n), ncclSuccess);
    ASSERT_EQ(slot->stamp, 1u) << "no clear-to-send arrived";
  }
  for (uint32_t i = 0; i < c.writes; ++i)  // empty writes: only the immediates matter
    ASSERT_EQ(ep[c.qp]->post(IBV_WR_RDMA_WRITE_WITH_IMM, i, 0, 0, true, 0, 0, htonl(c.imm)), 0);
  const double t0 = now_s();
  for (const double end = t0 + 5; r == ncclSuccess && !done && now_s() < end;) r = net.test(req, &done, &n);
  EXPECT_EQ(r, ncclRemoteError);
  EXPECT_EQ(done, 0);
  EXPECT_LT(now_s() - t0, 2.0);
  std::string log;
  for (const auto& l : log_lines()) log += l + "\n";
  EXPECT_GE(count_log(c.expect), 1) << "expected a WARN containing: " << c.expect << "\n" << log;
  for (size_t i = 0; i < rbuf.size(); ++i) ASSERT_EQ(rbuf[i], 0x5A) << "byte " << i << " written";
  EXPECT_EQ(net.dereg_mr(rc, mh), ncclSuccess);
  EXPECT_EQ(net.close_recv(rc), ncclSuccess);
  close(fd);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, IbHostileSender,
    ::testing::Values(
        // Immediates on QP 1 with no message begun on QP 0: one receive is open, the second fails.
        Hostile{"PartsWithoutAMessage", 1, 3, 4096, "a part for no receive that can still arrive"},
        Hostile{"LargerThanTheReceive", 0, 1, 65537, "does not fit the receive"},
        Hostile{"CompressedBeyondStaging", 0, 1, 0x80000000u | 100000, "does not fit the receive"},
        Hostile{"MailboxKeyNotThePeers", 0, 0, 0, "stale or wrong rkey", 0x5A5A}),
    [](const auto& info) { return std::string(info.param.name); });

// A receiver that completes the verbs handshake (the plugin connects to it) and then writes a
// clear-to-send that breaks the protocol into the sender's mailbox: the send fails with an error
// and a WARN that names it, never a crash or a hang.
struct HostileCts {
  const char* name;
  uint32_t n;      // receives the clear-to-send claims
  bool bad_key;    // the placement's rkey is not the receiver's
  const char* expect;
};

class IbHostileReceiver : public IbConnect, public ::testing::WithParamInterface<HostileCts> {};

TEST_P(IbHostileReceiver, FailsTheSend) {
  using namespace zipccl::verbs;
  const HostileCts c = GetParam();
  clear_log();
  FakeVerbsPeer peer;
  QpInfo theirs;
  int lfd = -1, cfd = -1;
  void* sc = nullptr;
  ASSERT_EQ(connect_fake_receiver(net, handle, &peer, &theirs, &lfd, &cfd, &sc), "");
  const auto& ep = peer.ep;
  std::vector<char> sbuf(4096, 1);
  void* mh = nullptr;
  ASSERT_EQ(net.reg_mr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  // The clear-to-send, written as the receiver would: one RDMA write of the slot.
  CtsSlot slot;
  std::memset(&slot, 0, sizeof slot);
  slot.stamp = 1;
  slot.n = c.n;
  const uint32_t shown = std::min(c.n, zipccl::kMaxRecvs);
  for (uint32_t i = 0; i < shown; ++i) {
    slot.e[i].tag = 1;
    slot.e[i].capacity = sbuf.size();
    slot.e[i].target_addr = ep[0]->addr(65536);
    slot.e[i].target_rkey = c.bad_key ? ep[0]->mr()->rkey ^ 0x5A5A : ep[0]->mr()->rkey;
  }
  const uint32_t one = 1;
  std::memcpy(reinterpret_cast<char*>(&slot) + end_stamp_offset(shown), &one, sizeof one);
  std::memcpy(ep[0]->buffer() + 8192, &slot, sizeof slot);
  ASSERT_EQ(ep[0]->post(IBV_WR_RDMA_WRITE, 1, 8192, sizeof slot, true, theirs.mailbox_addr, theirs.mailbox_rkey), 0);
  void* req = nullptr;
  ncclResult_t r = ncclSuccess;
  int done = 0, n = 0;
  for (const double end = now_s() + 10; r == ncclSuccess && !done && now_s() < end;)
    r = req ? net.test(req, &done, &n) : net.isend(sc, sbuf.data(), sbuf.size(), 1, mh, &req);
  EXPECT_NE(r, ncclSuccess);
  EXPECT_EQ(done, 0);
  EXPECT_GE(count_log(c.expect), 1) << "expected a WARN containing: " << c.expect;
  EXPECT_EQ(net.dereg_mr(sc, mh), ncclSuccess);
  EXPECT_EQ(net.close_send(sc), ncclSuccess);
  close(cfd);
  close(lfd);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, IbHostileReceiver,
    ::testing::Values(HostileCts{"NoReceives", 0, false, "a clear-to-send of 0 receives"},
                      HostileCts{"MoreReceivesThanAllowed", 9, false, "a clear-to-send of 9 receives"},
                      HostileCts{"TargetNotTheReceivers", 1, true, "remote access"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
