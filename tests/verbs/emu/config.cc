#include "config.h"

#include <cerrno>
#include <cstdlib>
#include <set>

namespace zipccl::verbs::emu {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// A whole decimal number in [lo, hi].
bool parse_number(const std::string& s, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool parse_device_specs(const char* env, std::vector<DeviceSpec>* out, std::string* error) {
  out->clear();
  if (!env) {
    out->push_back(DeviceSpec{"emu_0"});
    return true;
  }
  if (!*env) return true;
  std::set<std::string> names;
  for (const std::string& entry : split(env, ',')) {
    std::vector<std::string> f = split(entry, ':');
    DeviceSpec spec;
    spec.name = f[0];
    if (!valid_name(spec.name)) {
      *error = "NCCL_ZIP_EMU_DEVICES: bad device name '" + spec.name + "' in '" + entry + "'";
      return false;
    }
    if (!names.insert(spec.name).second) {
      *error = "NCCL_ZIP_EMU_DEVICES: device '" + spec.name + "' listed twice";
      return false;
    }
    if (f.size() > 4) {
      *error = "NCCL_ZIP_EMU_DEVICES: too many fields in '" + entry + "'";
      return false;
    }
    if (f.size() > 1) {
      if (f[1] == "roce") {
        spec.roce = true;
      } else if (f[1] != "ib") {
        *error = "NCCL_ZIP_EMU_DEVICES: link layer must be ib or roce in '" + entry + "'";
        return false;
      }
    }
    if (f.size() > 2) {
      uint64_t n;
      if (!parse_number(f[2], 1, 8, &n)) {
        *error = "NCCL_ZIP_EMU_DEVICES: port count must be 1..8 in '" + entry + "'";
        return false;
      }
      spec.ports = static_cast<int>(n);
    }
    if (f.size() > 3) {
      if (f[3] != "down") {
        *error = "NCCL_ZIP_EMU_DEVICES: the fourth field can only be 'down' in '" + entry + "'";
        return false;
      }
      spec.down = true;
    }
    out->push_back(spec);
  }
  return true;
}

bool parse_fault_plan(const char* env, FaultPlan* out, std::string* error) {
  *out = FaultPlan{};
  if (!env || !*env) return true;
  for (const std::string& entry : split(env, ',')) {
    size_t colon = entry.find(':');
    std::string kind = entry.substr(0, colon);
    uint64_t n = 0;
    if (colon == std::string::npos || !parse_number(entry.substr(colon + 1), 1, UINT32_MAX, &n)) {
      *error = "NCCL_ZIP_EMU_FAULT: expected kind:N with N >= 1 in '" + entry + "'";
      return false;
    }
    if (kind == "rkey") {
      out->rkey = n;
    } else if (kind == "retry") {
      out->retry = n;
    } else if (kind == "qp_error") {
      out->qp_error = n;
    } else if (kind == "device_lost") {
      out->device_lost = n;
    } else if (kind == "delay_us") {
      out->delay_us = n;
    } else {
      *error = "NCCL_ZIP_EMU_FAULT: unknown fault '" + kind +
               "' (rkey, retry, qp_error, device_lost, delay_us)";
      return false;
    }
  }
  return true;
}

bool parse_gdr_support(const char* env, GdrSupport* out, std::string* error) {
  *out = GdrSupport{};
  if (!env) return true;
  GdrSupport g{false, false};
  bool none = false;
  std::vector<std::string> words = split(env, ',');
  for (const std::string& w : words) {
    if (w == "dmabuf") {
      g.dmabuf = true;
    } else if (w == "peermem") {
      g.peermem = true;
    } else if (w == "none") {
      none = true;
    } else {
      *error = "NCCL_ZIP_EMU_GDR: unknown '" + w + "' (dmabuf, peermem or none)";
      return false;
    }
  }
  if (none && words.size() > 1) {
    *error = "NCCL_ZIP_EMU_GDR: 'none' cannot be combined with other values";
    return false;
  }
  *out = g;
  return true;
}

}  // namespace zipccl::verbs::emu
