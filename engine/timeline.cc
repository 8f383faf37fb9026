#include "timeline.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "log.h"
#include "param.h"

namespace zipccl {
namespace {

ZIP_STR_PARAM(timeline_dir, "NCCL_ZIP_TIMELINE")

}  // namespace

std::unique_ptr<Timeline> Timeline::create(bool send, const std::string& peer) {
  if (timeline_dir().empty()) return nullptr;
  static std::atomic<int> count{0};
  const std::string path = timeline_dir() + "/zipccl-" + std::to_string(getpid()) + "-" + (send ? "send" : "recv") +
                           "-" + std::to_string(count++) + ".csv";
  return std::unique_ptr<Timeline>(new Timeline(path, send, peer));
}

Timeline::Timeline(std::string path, bool send, std::string peer)
    : path_(std::move(path)), send_(send), peer_(std::move(peer)) {}

Timeline::~Timeline() {
  FILE* f = fopen(path_.c_str(), "w");
  if (!f) {
    ZIP_WARN("NCCL_ZIP_TIMELINE: cannot write %s", path_.c_str());
    return;
  }
  static const char* const names[] = {"post", "cts", "coded", "wire", "done", "defer", "gpu_taken", "gpu_start", "gpu_end"};
  fprintf(f, "# %s comm, peer %s, pid %d\nt_ns,event,seq,sub,bytes,compressed,gpu\n", send_ ? "send" : "recv",
          peer_.c_str(), int(getpid()));
  for (const Entry& e : events_)
    fprintf(f, "%lld,%s,%u,%u,%llu,%d,%d\n", (long long)e.t_ns, names[e.event], e.seq, e.sub,
            (unsigned long long)e.bytes, (e.flags & kCompressed) ? 1 : 0, (e.flags & kOnGpu) ? 1 : 0);
  fclose(f);
  ZIP_INFO(NCCL_NET, "NCCL_ZIP_TIMELINE: %zu events in %s%s", events_.size(), path_.c_str(),
           events_.size() == kMaxEvents ? " (the first ones only)" : "");
}

}  // namespace zipccl
