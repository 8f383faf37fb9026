#include "overrides.h"

#include <cstdlib>
#include <sstream>

namespace zipccl::tuner {
namespace {

int index_of(const std::string& s, std::initializer_list<const char*> names) {
  int i = 0;
  for (const char* n : names) {
    if (s == n) return i;
    ++i;
  }
  return -1;
}

bool to_long(const std::string& s, long long* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  *v = std::strtoll(s.c_str(), &end, 10);
  return *end == '\0';
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

std::vector<Override> parse_overrides(const std::string& text, std::vector<std::string>* errors) {
  std::vector<Override> out;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');) f.push_back(trim(c));
    auto bad = [&](const std::string& why) { errors->push_back("line " + std::to_string(number) + ": " + why); };
    if (f.size() != 8 && f.size() != 10) {
      bad("expected 8 or 10 fields, found " + std::to_string(f.size()));
      continue;
    }
    Override o{};
    o.func = index_of(f[0], {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"});
    o.algo = index_of(f[3], {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"});
    o.proto = index_of(f[4], {"ll", "ll128", "simple"});
    long long v[7];
    bool numbers = true;
    const int fields[] = {1, 2, 5, 6, 7, 8, 9};
    for (int i = 0; i < 7; ++i) {
      v[i] = -1;
      if (fields[i] < int(f.size())) numbers &= to_long(f[size_t(fields[i])], &v[i]);
    }
    if (o.func < 0) bad("unknown collective '" + f[0] + "'");
    else if (o.algo < 0) bad("unknown algorithm '" + f[3] + "'");
    else if (o.proto < 0) bad("unknown protocol '" + f[4] + "'");
    else if (!numbers || v[0] < 0 || v[1] < v[0]) bad("sizes and counts must be integers, min_bytes <= max_bytes");
    else {
      o.min_bytes = size_t(v[0]);
      o.max_bytes = size_t(v[1]);
      o.channels = int(v[2]);
      o.nnodes = int(v[3]);
      o.nranks = int(v[4]);
      o.pipe_ops = int(v[5]);
      o.reg_buff = int(v[6]);
      out.push_back(o);
    }
  }
  return out;
}

const Override* find_override(const std::vector<Override>& list, int func, size_t nbytes, int nnodes, int nranks,
                              int pipe_ops, int reg_buff) {
  for (const Override& o : list)
    if (o.func == func && nbytes >= o.min_bytes && nbytes <= o.max_bytes && (o.nnodes < 0 || o.nnodes == nnodes) &&
        (o.nranks < 0 || o.nranks == nranks) && (o.pipe_ops < 0 || o.pipe_ops == pipe_ops) &&
        (o.reg_buff < 0 || o.reg_buff == reg_buff))
      return &o;
  return nullptr;
}

}  // namespace zipccl::tuner
