#include "link_backlog.h"

#include <map>
#include <memory>
#include <mutex>

namespace zipccl {

LinkBacklog* link_backlog(int dev) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<LinkBacklog>> backlogs;
  std::lock_guard<std::mutex> g(mu);
  std::unique_ptr<LinkBacklog>& b = backlogs[dev];
  if (!b) b.reset(new LinkBacklog);
  return b.get();
}

}  // namespace zipccl
