#include "param.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "log.h"

namespace zipccl {

int64_t env_int(const char* name, int64_t def, int64_t lo, int64_t hi) {
  const char* s = std::getenv(name);
  if (!s || !*s) return def;
  // Ours are decimal (NCCL_ZIP_CPU_THREADS=010 is ten); NCCL's own names keep NCCL's parsing,
  // which takes 0x and a leading 0 as hex and octal.
  const bool ours = std::strncmp(name, "NCCL_ZIP_", 9) == 0;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, ours ? 10 : 0);
  if (errno || *end || v < lo || v > hi) {
    ZIP_WARN("ignoring %s=%s (expected an integer in [%lld, %lld]), using %lld", name, s,
             (long long)lo, (long long)hi, (long long)def);
    // Also where NCCL_DEBUG is unset (NCCL then prints no WARN): a knob the user set and we
    // ignore must not go unnoticed.
    std::fprintf(stderr, "NET/Zip : ignoring %s=%s (expected an integer in [%lld, %lld]), using %lld\n", name, s,
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
