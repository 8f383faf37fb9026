// What NCCL's IB transport derives from a port's attributes, as pure functions: link speed,
// link-layer name and GID selection (net_ib init.cc / connect.cc). The caller queries the port
// and its GID table through the loaded libibverbs (ibv_loader.h) and sysfs (sysfs.h).
#pragma once

#include <cstdint>
#include <vector>

namespace zipccl::verbs {

// Mbps from ibv_port_attr's active_width and active_speed (active_speed_ex, when non-zero, wins:
// XDR does not fit in the 8-bit active_speed). As NCCL, the lowest set bit picks the table entry
// and unknown values give the last entry (width 2x, speed XDR). When ibv_query_port_speed exists
// (IBVERBS_1.16) NCCL uses its value x 100 instead.
int64_t port_speed_mbps(int active_width, int active_speed, int active_speed_ex);

// "IB" for IBV_LINK_LAYER_INFINIBAND, "RoCE" for IBV_LINK_LAYER_ETHERNET, else "unknown".
const char* link_layer_name(int link_layer);

struct GidEntry {
  uint8_t raw[16];
  int roce_version;  // 1 or 2 (sysfs gid_attrs/types), -1 unknown
};

// NCCL's knobs for GID selection.
struct GidPolicy {
  int gid_index = -1;            // NCCL_IB_GID_INDEX: RoCE only; >= 0 is used as given
  int roce_version = 2;          // NCCL_IB_ROCE_VERSION_NUM
  int family = 2;                // NCCL_IB_ADDR_FAMILY: AF_INET (2) or AF_INET6 (10)
  int routable_flid_index = 1;   // NCCL_IB_ROUTABLE_FLID_GID_INDEX: IB only
  // NCCL_IB_ADDR_RANGE ("addr/bits" in `family`): RoCE GIDs must lie in it. range holds the
  // address as a GID would (IPv4 in bytes 12-15); range_bits 0 means no range.
  uint8_t range[16] = {};
  int range_bits = 0;
};

// From the environment, parsed as NCCL does (unparsable numbers keep the default; an address
// family other than AF_INET/AF_INET6 means AF_INET; an address range without "/", with an address
// of another family or a prefix longer than the family's is ignored).
GidPolicy gid_policy_from_env();
// Whether the GID lies in the policy's NCCL_IB_ADDR_RANGE (always, without one).
bool gid_in_range(const uint8_t raw[16], const GidPolicy& policy);

// AF_INET for IPv4-mapped GIDs (::ffff:a.b.c.d, and NCCL's ff0e::ffff:a.b.c.d), else AF_INET6.
int gid_family(const uint8_t raw[16]);
// Neither unset (all zero, or fe80:: with a zero interface id) nor link-local (fe80::/64).
bool gid_valid(const uint8_t raw[16]);

// The GID index NCCL would use; table[i] is GID index i (the port's gid_tbl_len entries).
// IB: routable_flid_index if that GID carries a FLID, else 0. RoCE: gid_index if set, else the
// best of the table for family, address range and roce_version (NCCL's ncclUpdateGidIndex walk
// from index 0).
int select_gid_index(int link_layer, const std::vector<GidEntry>& table, const GidPolicy& policy);

}  // namespace zipccl::verbs
