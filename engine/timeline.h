// Per-message timestamps of one comm (NCCL_ZIP_TIMELINE=<directory>), written as CSV when the
// comm closes: where a message waits on its way (CTS, codec, the link's order, the transfer,
// NCCL's next test). scripts/timeline.py reads the files of all ranks. Off (no object) unless set.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "clock.h"
#include "zipccl/service_protocol.h"

namespace zipccl {

class Timeline {
 public:
  // Send side: kPost isend, kCts a clear-to-send taken (bytes: its placements), kCoded encode
  // finished, kWire handed to the link, kDone test() said done, kDefer an isend that returned no
  // request (the first try of one NCCL then repeats; seq and sub 0, bytes its size): the next
  // kPost is that message's, so the time between is its wait (for a clear-to-send, or for a
  // cold kernel: NCCL_ZIP_GPU_WAIT_US).
  // Receive side: kPost irecv, kWire arrived, kCoded decoded, kDone test() said done. A message
  // sent ahead of its clear-to-send (Link::post_eager) is logged by its sender as seq = its index
  // on the connection, sub kMaxRecvs.
  // Either side, a message the resident GPU codec coded: kGpuTaken, kGpuStart, kGpuEnd at its
  // job's times (gpu::JobTimes), on the GPU's clock, not this one: logged with its kCoded.
  enum Event : uint8_t { kPost, kCts, kCoded, kWire, kDone, kDefer, kGpuTaken, kGpuStart, kGpuEnd };
  enum Flag : uint8_t { kCompressed = 1, kOnGpu = 2 };

  // Null when NCCL_ZIP_TIMELINE is unset.
  static std::unique_ptr<Timeline> create(bool send, const std::string& peer);
  ~Timeline();  // writes the file
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Keeps the first kMaxEvents events (a few seconds of traffic): enough to see a pipeline.
  void add(Event e, uint32_t seq, uint32_t sub, uint64_t bytes, uint8_t flags = 0) {
    add_at(now_ns(), e, seq, sub, bytes, flags);
  }
  // The job's times that are known.
  void add_gpu(const gpu::JobTimes& t, uint32_t seq, uint32_t sub, uint64_t bytes) {
    const uint64_t at[] = {t.taken, t.start, t.end};
    for (int i = 0; i < 3; ++i)
      if (at[i]) add_at(int64_t(at[i]), Event(kGpuTaken + i), seq, sub, bytes, kOnGpu);
  }

 private:
  static constexpr size_t kMaxEvents = size_t(1) << 20;
  struct Entry {
    int64_t t_ns;
    uint64_t bytes;
    uint32_t seq, sub;
    Event event;
    uint8_t flags;
  };
  Timeline(std::string path, bool send, std::string peer);
  void add_at(int64_t t_ns, Event e, uint32_t seq, uint32_t sub, uint64_t bytes, uint8_t flags) {
    if (events_.size() < kMaxEvents) events_.push_back({t_ns, bytes, seq, sub, e, flags});
  }

  const std::string path_;
  const bool send_;
  const std::string peer_;
  std::vector<Entry> events_;
};

}  // namespace zipccl
