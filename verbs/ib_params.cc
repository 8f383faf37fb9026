#include "ib_params.h"

#include "log.h"

namespace zipccl::verbs {

int ib_mtu() {
  static const int v = [] {
    const int m = int(env_int("NCCL_IB_MTU", 0, 0, 4096));
    if (m == 0 || (m >= 256 && (m & (m - 1)) == 0)) return m;
    ZIP_WARN("ignoring NCCL_IB_MTU=%d (expected 256, 512, 1024, 2048 or 4096)", m);
    return 0;
  }();
  return v;
}

}  // namespace zipccl::verbs
