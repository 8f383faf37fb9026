#include "port_info.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace zipccl::verbs {
namespace {

// Index of the lowest set bit of val, or max when none of bits 0..max-1 is set.
int first_bit_set(int val, int max) {
  int i = 0;
  while (i < max && (val & (1 << i)) == 0) ++i;
  return i;
}

// ibv_port_attr.active_width bits 1x, 4x, 8x, 12x, 2x.
constexpr int kWidths[] = {1, 4, 8, 12, 2};
// Lane rate in Mbps for active_speed bits SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR.
constexpr int kSpeeds[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
constexpr int kNumWidths = sizeof(kWidths) / sizeof(kWidths[0]);
constexpr int kNumSpeeds = sizeof(kSpeeds) / sizeof(kSpeeds[0]);

uint32_t word(const uint8_t raw[16], int i) {  // i-th 32-bit big-endian word
  return uint32_t(raw[4 * i]) << 24 | uint32_t(raw[4 * i + 1]) << 16 | uint32_t(raw[4 * i + 2]) << 8 |
         raw[4 * i + 3];
}

// NCCL_PARAM semantics: a whole-string integer (any base strtoll takes), else the default.
int env_int(const char* name, int def) {
  const char* s = std::getenv(name);
  if (!s || !*s) return def;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 0);
  return (errno || *end != '\0') ? def : static_cast<int>(v);
}

}  // namespace

int64_t port_speed_mbps(int active_width, int active_speed, int active_speed_ex) {
  int speed = active_speed_ex ? active_speed_ex : active_speed;
  return int64_t(kSpeeds[first_bit_set(speed, kNumSpeeds - 1)]) *
         kWidths[first_bit_set(active_width, kNumWidths - 1)];
}

const char* link_layer_name(int link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND: return "IB";
    case IBV_LINK_LAYER_ETHERNET: return "RoCE";
    default: return "unknown";
  }
}

GidPolicy gid_policy_from_env() {
  GidPolicy p;
  p.gid_index = env_int("NCCL_IB_GID_INDEX", p.gid_index);
  p.roce_version = env_int("NCCL_IB_ROCE_VERSION_NUM", p.roce_version);
  p.routable_flid_index = env_int("NCCL_IB_ROUTABLE_FLID_GID_INDEX", p.routable_flid_index);
  const char* fam = std::getenv("NCCL_IB_ADDR_FAMILY");
  p.family = fam && std::strcmp(fam, "AF_INET6") == 0 ? AF_INET6 : AF_INET;
  if (const char* range = std::getenv("NCCL_IB_ADDR_RANGE")) {
    const char* slash = std::strchr(range, '/');
    const std::string addr(range, slash ? size_t(slash - range) : 0);
    const int bits = slash ? static_cast<int>(std::strtol(slash + 1, nullptr, 10)) : 0;
    uint8_t parsed[16] = {};
    const bool v4 = p.family == AF_INET;
    if (slash && inet_pton(p.family, addr.c_str(), v4 ? parsed + 12 : parsed) == 1 && bits >= 0 &&
        bits <= (v4 ? 32 : 128)) {
      std::memcpy(p.range, parsed, sizeof parsed);
      p.range_bits = bits;
    }
  }
  return p;
}

bool gid_in_range(const uint8_t raw[16], const GidPolicy& policy) {
  const int first = policy.family == AF_INET ? 12 : 0;  // an IPv4 GID keeps its address in bytes 12-15
  for (int bit = 0; bit < policy.range_bits; ++bit) {
    const int byte = first + bit / 8, mask = 0x80 >> (bit % 8);
    if ((raw[byte] ^ policy.range[byte]) & mask) return false;
  }
  return true;
}

int gid_family(const uint8_t raw[16]) {
  bool v4_mapped = word(raw, 0) == 0 && word(raw, 1) == 0 && word(raw, 2) == 0x0000ffff;
  bool v4_mapped_multicast = word(raw, 0) == 0xff0e0000 && word(raw, 1) == 0 && word(raw, 2) == 0x0000ffff;
  return v4_mapped || v4_mapped_multicast ? AF_INET : AF_INET6;
}

bool gid_valid(const uint8_t raw[16]) {
  bool zero_trailer = (word(raw, 1) | word(raw, 2) | word(raw, 3)) == 0;
  bool unset = zero_trailer && (word(raw, 0) == 0 || word(raw, 0) == 0xfe800000);
  bool link_local = word(raw, 0) == 0xfe800000 && word(raw, 1) == 0;
  return !unset && !link_local;
}

int select_gid_index(int link_layer, const std::vector<GidEntry>& table, const GidPolicy& policy) {
  int n = static_cast<int>(table.size());
  if (link_layer == IBV_LINK_LAYER_INFINIBAND) {
    // The FLID (routable LID for IB routers) sits in bytes 4-5 of the GID's subnet prefix.
    int i = policy.routable_flid_index;
    if (i >= 0 && i < n && (table[i].raw[4] | table[i].raw[5]) != 0) return i;
    return 0;
  }
  if (policy.gid_index >= 0) return policy.gid_index;
  // Walk the table keeping the best so far: a GID of the wanted family beats one of the other
  // family; among the wanted family, a valid one of the wanted RoCE version beats a different
  // version or an invalid one.
  int best = 0;
  for (int next = 1; next < n; ++next) {
    const GidEntry& cur = table[best];
    const GidEntry& cand = table[next];
    int cur_fam = gid_family(cur.raw), cand_fam = gid_family(cand.raw);
    const bool in_range = gid_in_range(cand.raw, policy);
    if (cand_fam != cur_fam && cand_fam == policy.family && in_range) {
      best = next;
      continue;
    }
    if (cand_fam != policy.family || !gid_valid(cand.raw) || !in_range) continue;
    bool better = cur.roce_version != cand.roce_version || !gid_valid(cur.raw);
    if (better && cand.roce_version == policy.roce_version) best = next;
  }
  return best;
}

}  // namespace zipccl::verbs
