#include "hca_filter.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>

namespace zipccl::verbs {
namespace {

struct MatchCase {
  const char* spec;  // NCCL_IB_HCA; nullptr: unset
  const char* dev;
  int port;
  bool selected;
};

void PrintTo(const MatchCase& c, std::ostream* os) {
  *os << "NCCL_IB_HCA=" << (c.spec ? c.spec : "(unset)") << " " << c.dev << ":" << c.port;
}

class HcaMatch : public ::testing::TestWithParam<MatchCase> {};

TEST_P(HcaMatch, AsNccl) {
  const MatchCase& c = GetParam();
  EXPECT_EQ(parse_hca_filter(c.spec).selects(c.dev, c.port), c.selected);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HcaMatch,
    ::testing::Values(
        // Unset or empty: everything.
        MatchCase{nullptr, "mlx5_0", 1, true}, MatchCase{"", "mlx5_0", 1, true},
        MatchCase{",,", "mlx5_0", 2, true},
        // Prefix match by default.
        MatchCase{"mlx5", "mlx5_0", 1, true}, MatchCase{"mlx5", "mlx4_0", 1, false},
        MatchCase{"mlx5_1", "mlx5_10", 1, true},  // the classic prefix surprise
        MatchCase{"mlx5_10", "mlx5_1", 1, false},
        // Exact.
        MatchCase{"=mlx5_1", "mlx5_1", 1, true}, MatchCase{"=mlx5_1", "mlx5_10", 1, false},
        MatchCase{"=mlx5", "mlx5_0", 1, false},
        // Ports: none means any; a port selects only that one.
        MatchCase{"mlx5_0:1", "mlx5_0", 1, true}, MatchCase{"mlx5_0:1", "mlx5_0", 2, false},
        MatchCase{"mlx5_0:", "mlx5_0", 2, true},  // empty port: any
        MatchCase{"mlx5_0:x", "mlx5_0", 1, false},  // atoi("x") == 0, no such port
        MatchCase{"mlx5_0:1:0:3", "mlx5_0", 1, true},  // rail/plane fields ignored
        MatchCase{"mlx5_0:2", "mlx5_0", -1, true},  // caller port -1: any entry port
        // Lists.
        MatchCase{"mlx5_0:1,mlx5_1:2", "mlx5_1", 2, true},
        MatchCase{"mlx5_0:1,mlx5_1:2", "mlx5_1", 1, false},
        MatchCase{"mlx5_0,,mlx5_3", "mlx5_3", 1, true},
        MatchCase{":1,mlx5_3", "mlx5_0", 1, false},  // nameless entry skipped, not "any name"
        // Exclusion.
        MatchCase{"^mlx5_0", "mlx5_0", 1, false}, MatchCase{"^mlx5_0", "mlx5_1", 1, true},
        MatchCase{"^mlx5_0:1", "mlx5_0", 2, true}, MatchCase{"^mlx5_0:1", "mlx5_0", 1, false},
        MatchCase{"^mlx5", "mlx5_7", 1, false}, MatchCase{"^mlx5", "bnxt_re0", 1, true},
        MatchCase{"^=mlx5_1", "mlx5_10", 1, true}, MatchCase{"^=mlx5_1", "mlx5_1", 1, false},
        MatchCase{"^", "mlx5_0", 1, false},  // empty list matches all, then all are excluded
        // '=' before '^' is not an exclusion: "^mlx5_0" becomes an exact name.
        MatchCase{"=^mlx5_0", "mlx5_0", 1, false}, MatchCase{"=^mlx5_0", "^mlx5_0", 1, true}));

TEST(HcaParse, Fields) {
  HcaFilter f = parse_hca_filter("^=mlx5_0:1,mlx5_1,,:3,mlx5_2:");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.exact);
  ASSERT_EQ(f.entries.size(), 3u);
  EXPECT_EQ(f.entries[0].prefix, "mlx5_0");
  EXPECT_EQ(f.entries[0].port, 1);
  EXPECT_EQ(f.entries[1].prefix, "mlx5_1");
  EXPECT_EQ(f.entries[1].port, -1);
  EXPECT_EQ(f.entries[2].prefix, "mlx5_2");
  EXPECT_EQ(f.entries[2].port, -1);
}

TEST(HcaParse, AtMost32Entries) {
  std::string spec = "=";  // exact: "dev3" would otherwise select dev32 by prefix
  for (int i = 0; i < 40; ++i) spec += "dev" + std::to_string(i) + ",";
  HcaFilter f = parse_hca_filter(spec.c_str());
  ASSERT_EQ(f.entries.size(), static_cast<size_t>(kMaxHcaEntries));
  EXPECT_EQ(f.entries.back().prefix, "dev31");
  EXPECT_TRUE(f.selects("dev31", 1));
  EXPECT_FALSE(f.selects("dev32", 1));
}

TEST(HcaParse, LongNamesTruncatedTo63) {
  std::string longname(80, 'a');
  HcaFilter f = parse_hca_filter(longname.c_str());
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_EQ(f.entries[0].prefix.size(), kMaxHcaNameLen);
  EXPECT_TRUE(f.selects(longname, 1));  // prefix of the truncated name
  HcaFilter exact = parse_hca_filter(("=" + longname).c_str());
  EXPECT_FALSE(exact.selects(longname, 1));  // as NCCL: the truncated name is not equal
}

}  // namespace
}  // namespace zipccl::verbs
