#include "hca_filter.h"

#include <cstdlib>
#include <cstring>

namespace zipccl::verbs {
namespace {

// Splits s at every `sep`, keeping empty fields ("a::b" -> a, "", b).
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

}  // namespace

HcaFilter parse_hca_filter(const char* spec) {
  HcaFilter f;
  if (!spec) return f;
  if (*spec == '^') { f.exclude = true; ++spec; }
  if (*spec == '=') { f.exact = true; ++spec; }
  // NCCL tokenises with strtok(","): empty entries vanish. Within an entry the fields are
  // name:port[:rail:plane]; an entry without a name is skipped, an empty port means any, and a
  // port is read with atoi (so "x" is port 0, which no real port matches). Rail and plane
  // (newer NCCL) do not concern device selection and are ignored.
  for (const std::string& entry : split(spec, ',')) {
    if (f.entries.size() == static_cast<size_t>(kMaxHcaEntries)) break;
    if (entry.empty()) continue;
    std::vector<std::string> fields = split(entry, ':');
    if (fields[0].empty()) continue;
    HcaEntry e;
    e.prefix = fields[0].substr(0, kMaxHcaNameLen);
    e.port = fields.size() > 1 && !fields[1].empty() ? std::atoi(fields[1].c_str()) : -1;
    f.entries.push_back(std::move(e));
  }
  return f;
}

bool HcaFilter::selects(const std::string& name, int port) const {
  bool listed = entries.empty();
  for (const HcaEntry& e : entries) {
    bool name_ok = exact ? name == e.prefix : name.compare(0, e.prefix.size(), e.prefix) == 0;
    bool port_ok = port == -1 || e.port == -1 || port == e.port;
    if (name_ok && port_ok) { listed = true; break; }
  }
  return listed != exclude;
}

}  // namespace zipccl::verbs
