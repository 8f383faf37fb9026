#include "param.h"

#include <cerrno>
#include <cstdlib>

#include "log.h"

namespace zipccl {

int64_t env_int(const char* name, int64_t def, int64_t lo, int64_t hi) {
  const char* s = std::getenv(name);
  if (!s || !*s) return def;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 0);
  if (errno || *end || v < lo || v > hi) {
    ZIP_WARN("ignoring %s=%s (expected an integer in [%lld, %lld]), using %lld", name, s,
             (long long)lo, (long long)hi, (long long)def);
    return def;
  }
  ZIP_INFO(NCCL_ENV, "%s set to %lld", name, v);
  return v;
}

std::string env_str(const char* name) {
  const char* s = std::getenv(name);
  return s ? s : "";
}

}  // namespace zipccl
