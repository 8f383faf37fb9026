// NCCL_IB_HCA: which device:port pairs the verbs transport uses, with NCCL's syntax and meaning
// (src/misc/utils.cc parseStringList/matchIfList and net_ib's use of them):
//   "mlx5_0:1,mlx5_1"  comma list of name prefixes, each optionally ":port" (no port: any port)
//   "=mlx5_0"          names match exactly instead of by prefix
//   "^mlx5_2"          exclude what matches instead of selecting it ("^=" combines both)
// An empty list selects every device (and so "^" alone excludes every device, as in NCCL).
#pragma once

#include <string>
#include <vector>

namespace zipccl::verbs {

struct HcaEntry {
  std::string prefix;  // at most kMaxHcaNameLen characters (NCCL's netIf.prefix is char[64])
  int port;            // -1: any port
};

struct HcaFilter {
  bool exclude = false;  // leading '^'
  bool exact = false;    // '=' (after any '^')
  std::vector<HcaEntry> entries;

  // Whether device `name`, port `port` (1-based) is to be used.
  bool selects(const std::string& name, int port) const;
};

constexpr int kMaxHcaEntries = 32;  // NCCL's MAX_IB_DEVS: later entries are ignored
constexpr size_t kMaxHcaNameLen = 63;

// spec null (NCCL_IB_HCA unset) gives a filter that selects everything.
HcaFilter parse_hca_filter(const char* spec);

}  // namespace zipccl::verbs
