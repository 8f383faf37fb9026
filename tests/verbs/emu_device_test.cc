// Emulated devices, ports and GIDs (NCCL_ZIP_EMU_DEVICES), the exported symbols as the loader
// finds them, and clean open/close cycles.
#include <dirent.h>
#include <dlfcn.h>

#include <cstring>
#include <set>

#include "emu/config.h"
#include "emu_test_util.h"
#include "port_info.h"

namespace zipccl::verbs::emu_test {
namespace {

// An opened device list, closed when done.
struct DeviceList {
  explicit DeviceList(const char* spec) : env("NCCL_ZIP_EMU_DEVICES", spec) {
    list = ibv().get_device_list(&n);
  }
  ~DeviceList() {
    if (list) ibv().free_device_list(list);
  }
  ScopedEnv env;
  ibv_device** list = nullptr;
  int n = -1;
};

int open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}

TEST(EmuDevices, DefaultIsOneHdrInfinibandPort) {
  DeviceList d(nullptr);
  ASSERT_NE(d.list, nullptr);
  ASSERT_EQ(d.n, 1);
  EXPECT_EQ(d.list[1], nullptr);
  EXPECT_STREQ(ibv().get_device_name(d.list[0]), "emu_0");
  ibv_context* ctx = ibv().open_device(d.list[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr dev{};
  ASSERT_EQ(ibv().query_device(ctx, &dev), 0);
  EXPECT_EQ(dev.phys_port_cnt, 1);
  EXPECT_GT(dev.max_qp, 0);
  EXPECT_GE(dev.max_qp_wr, 1024);
  EXPECT_NE(dev.node_guid, 0u);
  EXPECT_EQ(extra().get_device_guid(d.list[0]), dev.node_guid);
  ibv_port_attr port{};
  ASSERT_EQ(ibv().query_port(ctx, 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(port.active_mtu, IBV_MTU_4096);
  EXPECT_EQ(port_speed_mbps(port.active_width, port.active_speed, 0), 200000);  // 4x HDR
  EXPECT_NE(port.lid, 0);
  EXPECT_LT(port.lid, 0xC000);
  EXPECT_EQ(ibv().query_port(ctx, 2, &port), EINVAL);
  // GID 0: fe80::/64 and the port GUID, whose low 16 bits are the LID.
  ibv_gid gid{};
  ASSERT_EQ(ibv().query_gid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[0], 0xfe);
  EXPECT_EQ(gid.raw[1], 0x80);
  ibv_port_attr again{};
  ASSERT_EQ(ibv().query_port(ctx, 1, &again), 0);
  EXPECT_EQ(gid.raw[14] << 8 | gid.raw[15], again.lid);
  ASSERT_EQ(ibv().query_gid(ctx, 1, 1, &gid), 0);
  EXPECT_EQ(gid.global.interface_id, 0u);  // an empty entry reads as zeros
  EXPECT_EQ(ibv().query_gid(ctx, 1, 4, &gid), -1);
  EXPECT_EQ(ibv().close_device(ctx), 0);
}

TEST(EmuDevices, ListFromEnvironment) {
  DeviceList d("mlx5_0:ib,mlx5_1:roce:2,mlx5_2:ib:1:down");
  ASSERT_NE(d.list, nullptr);
  ASSERT_EQ(d.n, 3);
  std::set<uint16_t> lids;
  for (int i = 0; i < 3; ++i) {
    ibv_context* ctx = ibv().open_device(d.list[i]);
    ASSERT_NE(ctx, nullptr);
    ibv_device_attr dev{};
    ASSERT_EQ(ibv().query_device(ctx, &dev), 0);
    EXPECT_EQ(dev.phys_port_cnt, i == 1 ? 2 : 1);
    for (uint8_t port = 1; port <= dev.phys_port_cnt; ++port) {
      ibv_port_attr attr{};
      ASSERT_EQ(ibv().query_port(ctx, port, &attr), 0);
      EXPECT_EQ(attr.state, i == 2 ? IBV_PORT_DOWN : IBV_PORT_ACTIVE);
      EXPECT_EQ(attr.link_layer, i == 1 ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND);
      if (i == 0) lids.insert(attr.lid);
      if (i != 0) {
        EXPECT_EQ(attr.lid, 0);  // RoCE has none; a DOWN port has none
      }
      if (i == 1) {
        // mlx5's layout: link-local v1/v2, IPv4-mapped v1/v2; NCCL's default picks index 3.
        std::vector<GidEntry> table;
        for (int g = 0; g < 4; ++g) {
          ibv_gid gid{};
          ASSERT_EQ(ibv().query_gid(ctx, port, g, &gid), 0);
          GidEntry e;
          std::memcpy(e.raw, gid.raw, 16);
          e.roce_version = g % 2 ? 2 : 1;
          table.push_back(e);
        }
        EXPECT_EQ(table[2].raw[10], 0xff);
        EXPECT_EQ(table[2].raw[12], 10);
        EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, table, GidPolicy{}), 3);
        uint16_t routing = static_cast<uint16_t>(table[3].raw[13] << 8 | table[3].raw[14]);
        EXPECT_TRUE(lids.insert(routing).second) << "routing ids must differ between ports";
      }
    }
    EXPECT_EQ(ibv().close_device(ctx), 0);
  }
  EXPECT_EQ(lids.size(), 3u);
  EXPECT_STREQ(ibv().get_device_name(d.list[2]), "mlx5_2");
}

TEST(EmuDevices, AddressesStayAcrossDeviceLists) {
  auto lid_of_first = [] {
    DeviceList d("a_dev:ib:1");
    ibv_context* ctx = ibv().open_device(d.list[0]);
    ibv_port_attr attr{};
    EXPECT_EQ(ibv().query_port(ctx, 1, &attr), 0);
    ibv().close_device(ctx);
    return attr.lid;
  };
  uint16_t first = lid_of_first();
  EXPECT_NE(first, 0);
  EXPECT_EQ(lid_of_first(), first);
}

TEST(EmuDevices, BadOrEmptySpec) {
  {
    DeviceList d("mlx5_0:iwarp");
    EXPECT_EQ(d.list, nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
  DeviceList d("");
  ASSERT_NE(d.list, nullptr);
  EXPECT_EQ(d.n, 0);
  EXPECT_EQ(d.list[0], nullptr);
}

TEST(EmuDevices, LoaderFindsTheOptionalSymbolsByVersion) {
  std::string error;
  auto lib = load_ibverbs(ZIP_VERBS_EMU_LIB, &error);
  ASSERT_NE(lib, nullptr) << error;
  EXPECT_NE(lib->fn().reg_mr_iova2, nullptr);
  EXPECT_NE(lib->fn().reg_dmabuf_mr, nullptr);
  EXPECT_EQ(lib->fn().query_port_speed, nullptr);
  void* self = dlopen(ZIP_VERBS_EMU_LIB, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(self, nullptr);
  dlclose(self);
}

TEST(EmuDevices, StringsMatchRdmaCore) {
  void* real = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!real) GTEST_SKIP() << "libibverbs.so.1 (rdma-core) is not installed";
  auto wc_str = reinterpret_cast<const char* (*)(ibv_wc_status)>(
      dlvsym(real, "ibv_wc_status_str", "IBVERBS_1.1"));
  auto ev_str = reinterpret_cast<const char* (*)(ibv_event_type)>(
      dlvsym(real, "ibv_event_type_str", "IBVERBS_1.1"));
  ASSERT_NE(wc_str, nullptr);
  ASSERT_NE(ev_str, nullptr);
  for (int s = IBV_WC_SUCCESS; s <= IBV_WC_TM_RNDV_INCOMPLETE + 1; ++s) {
    EXPECT_STREQ(ibv().wc_status_str(static_cast<ibv_wc_status>(s)), wc_str(static_cast<ibv_wc_status>(s)));
  }
  for (int e = IBV_EVENT_CQ_ERR; e <= IBV_EVENT_WQ_FATAL + 1; ++e) {
    EXPECT_STREQ(ibv().event_type_str(static_cast<ibv_event_type>(e)),
                 ev_str(static_cast<ibv_event_type>(e)));
  }
  dlclose(real);
}

TEST(EmuDevices, ExtendedVerbsReportUnsupported) {
  std::string error;
  auto ep = Endpoint::create({}, &error);
  ASSERT_NE(ep, nullptr) << error;
  ibv_context* ctx = ep->context();
  EXPECT_EQ(ctx->abi_compat, nullptr);
  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 16;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx, &cq_attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(ep->pd(), IBV_MW_TYPE_1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_td_init_attr td{};
  errno = 0;
  EXPECT_EQ(ibv_alloc_td(ctx, &td), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST(EmuDevices, OpenCloseCyclesReleaseEverything) {
  { DeviceList warm(nullptr); }  // the registry, its thread and sockets exist from here on
  int fds = open_fds();
  for (int i = 0; i < 30; ++i) {
    std::string error;
    auto ep = Endpoint::create({}, &error);
    ASSERT_NE(ep, nullptr) << error;
    ibv_comp_channel* ch = extra().create_comp_channel(ep->context());
    ASSERT_NE(ch, nullptr);
    EXPECT_EQ(extra().destroy_comp_channel(ch), 0);
  }
  EXPECT_EQ(open_fds(), fds);
}

TEST(EmuDevices, CloseWithObjectsStillOpenCleansUp) {
  int fds;
  {
    DeviceList d(nullptr);
    fds = open_fds();
    ibv_context* ctx = ibv().open_device(d.list[0]);
    ASSERT_NE(ctx, nullptr);
    ibv_pd* pd = ibv().alloc_pd(ctx);
    ibv_cq* cq = ibv().create_cq(ctx, 8, nullptr, nullptr, 0);
    ASSERT_NE(pd, nullptr);
    ASSERT_NE(cq, nullptr);
    std::vector<char> buf(4096);
    ASSERT_NE(ibv().reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {1, 1, 1, 1, 0};
    ASSERT_NE(ibv().create_qp(pd, &init), nullptr);
    ASSERT_NE(extra().create_comp_channel(ctx), nullptr);
    EXPECT_EQ(ibv().close_device(ctx), 0);  // says on stderr that 5 objects were left
  }
  EXPECT_EQ(open_fds(), fds);
}

TEST(EmuDevices, MemoryRegistrationChecks) {
  std::string error;
  auto ep = Endpoint::create({}, &error);
  ASSERT_NE(ep, nullptr) << error;
  errno = 0;
  EXPECT_EQ(ibv().reg_mr(ep->pd(), ep->buffer(), 4096, IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);  // remote write needs local write
  EXPECT_EQ(ibv().reg_mr(ep->pd(), ep->buffer(), 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv().reg_mr(ep->pd(), reinterpret_cast<void*>(4096), 4096, IBV_ACCESS_LOCAL_WRITE),
            nullptr);
  EXPECT_EQ(errno, EFAULT);  // nothing mapped there
  EXPECT_EQ(ibv().reg_dmabuf_mr(ep->pd(), 0, 4096, ep->addr(), -1, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EBADF);
  ibv_mr* a = ibv().reg_mr(ep->pd(), ep->buffer(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* b = ibv().reg_mr(ep->pd(), ep->buffer(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->lkey, b->lkey);
  EXPECT_NE(a->rkey, b->rkey);
  EXPECT_NE(a->lkey, a->rkey);
  EXPECT_EQ(a->addr, ep->buffer());
  EXPECT_EQ(a->length, 4096u);
  EXPECT_EQ(ibv().dereg_mr(a), 0);
  EXPECT_EQ(ibv().dereg_mr(b), 0);
}

TEST(EmuConfig, DeviceSpecs) {
  using emu::DeviceSpec;
  std::vector<DeviceSpec> specs;
  std::string error;
  ASSERT_TRUE(emu::parse_device_specs("a:roce:2,b,c:ib:1:down", &specs, &error)) << error;
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].name, "a");
  EXPECT_TRUE(specs[0].roce);
  EXPECT_EQ(specs[0].ports, 2);
  EXPECT_FALSE(specs[1].roce);
  EXPECT_EQ(specs[1].ports, 1);
  EXPECT_TRUE(specs[2].down);
  ASSERT_TRUE(emu::parse_device_specs(nullptr, &specs, &error));
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name, "emu_0");
  for (const char* bad : {"a,a", "a:eth", "a:ib:0", "a:ib:9", "a:ib:1:up", "a:ib:1:down:x", ",",
                          "a b", "a:ib:x"}) {
    EXPECT_FALSE(emu::parse_device_specs(bad, &specs, &error)) << bad;
    EXPECT_NE(error.find("NCCL_ZIP_EMU_DEVICES"), std::string::npos);
  }
}

TEST(EmuConfig, FaultPlans) {
  emu::FaultPlan plan;
  std::string error;
  ASSERT_TRUE(emu::parse_fault_plan("rkey:3,retry:1,qp_error:7,device_lost:9,delay_us:250", &plan,
                                    &error))
      << error;
  EXPECT_EQ(plan.rkey, 3u);
  EXPECT_EQ(plan.retry, 1u);
  EXPECT_EQ(plan.qp_error, 7u);
  EXPECT_EQ(plan.device_lost, 9u);
  EXPECT_EQ(plan.delay_us, 250u);
  ASSERT_TRUE(emu::parse_fault_plan("", &plan, &error));
  EXPECT_EQ(plan.rkey, 0u);
  for (const char* bad : {"rkey", "rkey:", "rkey:0", "rkey:-1", "bogus:1", "rkey:1x"}) {
    EXPECT_FALSE(emu::parse_fault_plan(bad, &plan, &error)) << bad;
  }
}

TEST(EmuConfig, GdrSupport) {
  emu::GdrSupport g;
  std::string error;
  struct Case {
    const char* env;
    bool dmabuf, peermem;
  };
  for (const Case& c : {Case{nullptr, true, false}, Case{"dmabuf", true, false},
                        Case{"peermem", false, true}, Case{"peermem,dmabuf", true, true},
                        Case{"dmabuf,dmabuf", true, false}, Case{"none", false, false}}) {
    ASSERT_TRUE(emu::parse_gdr_support(c.env, &g, &error)) << (c.env ? c.env : "unset") << error;
    EXPECT_EQ(g.dmabuf, c.dmabuf) << (c.env ? c.env : "unset");
    EXPECT_EQ(g.peermem, c.peermem) << (c.env ? c.env : "unset");
  }
  for (const char* bad : {"", ",", "dmabuf,", "none,dmabuf", "peermem,none", "DMABUF", "gdr"}) {
    EXPECT_FALSE(emu::parse_gdr_support(bad, &g, &error)) << bad;
    EXPECT_NE(error.find("NCCL_ZIP_EMU_GDR"), std::string::npos);
  }
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
