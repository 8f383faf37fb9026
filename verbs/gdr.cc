#include "gdr.h"

#include <unistd.h>

#include <cerrno>
#include <initializer_list>

namespace zipccl::verbs {

bool peermem_loaded(const std::string& root) {
  for (const char* f : {"/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
                        "/sys/module/nvidia_peermem/version"})
    if (access((root + f).c_str(), F_OK) == 0) return true;
  return false;
}

bool dmabuf_supported(const IbvFunctions& fn, ibv_pd* pd) {
  if (!fn.reg_dmabuf_mr) return false;
  errno = 0;
  if (ibv_mr* mr = fn.reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)) {  // no provider accepts this; if one does
    fn.dereg_mr(mr);
    return true;
  }
  return errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
}

}  // namespace zipccl::verbs
