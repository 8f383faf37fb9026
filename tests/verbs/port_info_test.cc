#include "port_info.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/socket.h>

#include <cstdlib>
#include <initializer_list>
#include <ostream>
#include <string>

namespace zipccl::verbs {
namespace {

// ibv_port_attr encodings (verbs.h documents them only in comments).
constexpr int k1x = 1, k4x = 2, k8x = 4, k12x = 8, k2x = 16;
constexpr int kSdr = 1, kQdr = 4, kFdr10 = 8, kFdr = 16, kEdr = 32, kHdr = 64, kNdr = 128, kXdr = 256;

struct SpeedCase {
  int width, speed, speed_ex;
  int64_t mbps;
};

void PrintTo(const SpeedCase& c, std::ostream* os) {
  *os << "width " << c.width << " speed " << c.speed << " speed_ex " << c.speed_ex;
}

class PortSpeed : public ::testing::TestWithParam<SpeedCase> {};

TEST_P(PortSpeed, AsNccl) {
  const SpeedCase& c = GetParam();
  EXPECT_EQ(port_speed_mbps(c.width, c.speed, c.speed_ex), c.mbps);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PortSpeed,
    ::testing::Values(SpeedCase{k1x, kSdr, 0, 2500}, SpeedCase{k4x, kQdr, 0, 40000},
                      SpeedCase{k4x, kFdr10, 0, 40000}, SpeedCase{k4x, kFdr, 0, 56000},
                      SpeedCase{k4x, kEdr, 0, 100000}, SpeedCase{k4x, kHdr, 0, 200000},
                      SpeedCase{k4x, kNdr, 0, 400000}, SpeedCase{k2x, kNdr, 0, 200000},
                      SpeedCase{k8x, kHdr, 0, 400000}, SpeedCase{k12x, kQdr, 0, 120000},
                      // XDR only fits active_speed_ex, which wins over active_speed.
                      SpeedCase{k4x, 0, kXdr, 800000}, SpeedCase{k4x, kHdr, kXdr, 800000},
                      // Several bits: the lowest counts.
                      SpeedCase{k4x | k8x, kEdr | kHdr, 0, 100000},
                      // Unknown (no known bit): NCCL falls to the last entries, 2x and XDR.
                      SpeedCase{0, 0, 0, 400000}, SpeedCase{64, kEdr, 0, 50000}));

TEST(LinkLayer, Names) {
  EXPECT_STREQ(link_layer_name(IBV_LINK_LAYER_INFINIBAND), "IB");
  EXPECT_STREQ(link_layer_name(IBV_LINK_LAYER_ETHERNET), "RoCE");
  EXPECT_STREQ(link_layer_name(IBV_LINK_LAYER_UNSPECIFIED), "unknown");
}

GidEntry gid(std::initializer_list<int> bytes, int roce_version = 2) {
  GidEntry g{};
  int i = 0;
  for (int b : bytes) g.raw[i++] = static_cast<uint8_t>(b);
  g.roce_version = roce_version;
  return g;
}

// Typical GIDs of a RoCE port.
const GidEntry kLinkLocal =
    gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55});
const GidEntry kIpv4 = gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1});
const GidEntry kIpv6 = gid({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});

GidEntry with_version(GidEntry g, int v) {
  g.roce_version = v;
  return g;
}

TEST(Gid, FamilyAndValidity) {
  EXPECT_EQ(gid_family(kIpv4.raw), AF_INET);
  EXPECT_EQ(gid_family(gid({0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 1, 1}).raw), AF_INET);
  EXPECT_EQ(gid_family(kIpv6.raw), AF_INET6);
  EXPECT_EQ(gid_family(kLinkLocal.raw), AF_INET6);
  EXPECT_EQ(gid_family(gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 10, 0, 0, 1}).raw), AF_INET6);

  EXPECT_TRUE(gid_valid(kIpv4.raw));
  EXPECT_TRUE(gid_valid(kIpv6.raw));
  EXPECT_FALSE(gid_valid(kLinkLocal.raw));
  EXPECT_FALSE(gid_valid(gid({}).raw));                   // unset
  EXPECT_FALSE(gid_valid(gid({0xfe, 0x80}).raw));         // fe80:: with no interface id
  EXPECT_TRUE(gid_valid(gid({0xfe, 0x80, 0, 0, 0, 0, 0, 1}).raw));  // fe80:0:0:1::/64 is not link-local
}

// mlx5 RoCE layout: per address a v1 and a v2 entry.
std::vector<GidEntry> roce_table() {
  return {with_version(kLinkLocal, 1), with_version(kLinkLocal, 2), with_version(kIpv4, 1),
          with_version(kIpv4, 2),      with_version(kIpv6, 1),      with_version(kIpv6, 2)};
}

TEST(Gid, RoceDefaultIsIpv4RoceV2) {
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, roce_table(), GidPolicy{}), 3);
}

TEST(Gid, RoceVersionAndFamilyChoose) {
  GidPolicy v1;
  v1.roce_version = 1;
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, roce_table(), v1), 2);
  GidPolicy v6;
  v6.family = AF_INET6;
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, roce_table(), v6), 5);
  v6.roce_version = 1;
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, roce_table(), v6), 4);
}

TEST(Gid, RoceExplicitIndexWins) {
  GidPolicy p;
  p.gid_index = 1;
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, roce_table(), p), 1);
}

TEST(Gid, RoceWithoutMatchingAddressKeepsIndexZero) {
  std::vector<GidEntry> only_link_local = {with_version(kLinkLocal, 1), with_version(kLinkLocal, 2)};
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, only_link_local, GidPolicy{}), 0);
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, {}, GidPolicy{}), 0);
}

TEST(Gid, RoceWantedVersionAbsentTakesFirstOfFamily) {
  // Only v1 entries: the family still decides, the first IPv4 GID is kept.
  std::vector<GidEntry> v1_only = {with_version(kLinkLocal, 1), with_version(kIpv4, 1),
                                   with_version(kIpv4, 1)};
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, v1_only, GidPolicy{}), 1);
}

TEST(Gid, InfinibandUsesFlidIndexOnlyWithAFlid) {
  GidPolicy p;
  p.gid_index = 3;  // RoCE only: ignored on IB
  std::vector<GidEntry> plain = {kLinkLocal, kLinkLocal};
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_INFINIBAND, plain, p), 0);
  GidEntry routable = kLinkLocal;
  routable.raw[4] = 0x00;
  routable.raw[5] = 0x2a;  // FLID 42
  std::vector<GidEntry> with_flid = {kLinkLocal, routable};
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_INFINIBAND, with_flid, p), 1);
  p.routable_flid_index = 5;  // beyond the table
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_INFINIBAND, with_flid, p), 0);
}

// Two IPv4 subnets and an IPv6 address, RoCE v2 each.
std::vector<GidEntry> two_subnets() {
  return {with_version(kLinkLocal, 2), with_version(kIpv4, 2),
          gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 9}), with_version(kIpv6, 2)};
}

GidPolicy with_range(int family, const char* range) {
  setenv("NCCL_IB_ADDR_FAMILY", family == AF_INET6 ? "AF_INET6" : "AF_INET", 1);
  setenv("NCCL_IB_ADDR_RANGE", range, 1);
  return gid_policy_from_env();
}

class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    const char* v = std::getenv(name);
    had_ = v != nullptr;
    if (had_) old_ = v;
  }
  ~EnvGuard() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  bool had_;
  std::string old_;
};

TEST(Gid, PolicyFromEnvironment) {
  EnvGuard a("NCCL_IB_GID_INDEX"), b("NCCL_IB_ROCE_VERSION_NUM"), c("NCCL_IB_ADDR_FAMILY"),
      d("NCCL_IB_ROUTABLE_FLID_GID_INDEX");
  unsetenv("NCCL_IB_GID_INDEX");
  unsetenv("NCCL_IB_ROCE_VERSION_NUM");
  unsetenv("NCCL_IB_ADDR_FAMILY");
  unsetenv("NCCL_IB_ROUTABLE_FLID_GID_INDEX");
  GidPolicy def = gid_policy_from_env();
  EXPECT_EQ(def.gid_index, -1);
  EXPECT_EQ(def.roce_version, 2);
  EXPECT_EQ(def.family, AF_INET);
  EXPECT_EQ(def.routable_flid_index, 1);

  setenv("NCCL_IB_GID_INDEX", "3", 1);
  setenv("NCCL_IB_ROCE_VERSION_NUM", "0x1", 1);
  setenv("NCCL_IB_ADDR_FAMILY", "AF_INET6", 1);
  setenv("NCCL_IB_ROUTABLE_FLID_GID_INDEX", "2", 1);
  GidPolicy set = gid_policy_from_env();
  EXPECT_EQ(set.gid_index, 3);
  EXPECT_EQ(set.roce_version, 1);
  EXPECT_EQ(set.family, AF_INET6);
  EXPECT_EQ(set.routable_flid_index, 2);

  EXPECT_EQ(set.range_bits, 0);  // no NCCL_IB_ADDR_RANGE

  setenv("NCCL_IB_GID_INDEX", "3x", 1);  // not a number: default
  setenv("NCCL_IB_ADDR_FAMILY", "inet6", 1);  // unknown: AF_INET
  GidPolicy bad = gid_policy_from_env();
  EXPECT_EQ(bad.gid_index, -1);
  EXPECT_EQ(bad.family, AF_INET);
}

TEST(Gid, AddressRangePicksTheSubnet) {
  EnvGuard a("NCCL_IB_ADDR_FAMILY"), b("NCCL_IB_ADDR_RANGE"), c("NCCL_IB_GID_INDEX");
  unsetenv("NCCL_IB_GID_INDEX");
  const std::vector<GidEntry> t = two_subnets();
  unsetenv("NCCL_IB_ADDR_RANGE");
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, t, gid_policy_from_env()), 1);  // the first IPv4 GID
  GidPolicy p = with_range(AF_INET, "192.168.0.0/16");
  EXPECT_EQ(p.range_bits, 16);
  EXPECT_FALSE(gid_in_range(kIpv4.raw, p));
  EXPECT_TRUE(gid_in_range(t[2].raw, p));
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, t, p), 2);
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, t, with_range(AF_INET, "10.0.0.0/8")), 1);
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, t, with_range(AF_INET, "192.168.7.9/32")), 2);
  // No GID in the range: index 0, as NCCL.
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, t, with_range(AF_INET, "172.16.0.0/12")), 0);
  // A /0 range holds everything.
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, t, with_range(AF_INET, "0.0.0.0/0")), 1);
  // IPv6 ranges compare the whole GID.
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, t, with_range(AF_INET6, "2001:db8::/32")), 3);
  EXPECT_EQ(select_gid_index(IBV_LINK_LAYER_ETHERNET, t, with_range(AF_INET6, "2001:db9::/32")), 0);
}

TEST(Gid, MalformedAddressRangeIsIgnored) {
  EnvGuard a("NCCL_IB_ADDR_FAMILY"), b("NCCL_IB_ADDR_RANGE");
  for (const char* r : {"192.168.0.0", "192.168.0.0/33", "2001:db8::/16", "not-an-address/8", "/8"})
    EXPECT_EQ(with_range(AF_INET, r).range_bits, 0) << r;
  EXPECT_EQ(with_range(AF_INET6, "2001:db8::/129").range_bits, 0);
  EXPECT_EQ(with_range(AF_INET6, "2001:db8::/48").range_bits, 48);
}

}  // namespace
}  // namespace zipccl::verbs
