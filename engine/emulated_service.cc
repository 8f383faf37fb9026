#include "emulated_service.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "clock.h"
#include "zipccl/codec.h"

namespace zipccl {

EmulatedServiceDevice::EmulatedServiceDevice(std::shared_ptr<Control> control)
    : c_(std::move(control)), host_(new gpu::ServiceHost) {
  std::memset(static_cast<void*>(host_.get()), 0, sizeof(gpu::ServiceHost));
  c_->device = this;
}

EmulatedServiceDevice::~EmulatedServiceDevice() {
  if (thread_.joinable()) thread_.join();
}

bool EmulatedServiceDevice::launch(uint32_t generation, int ctas, std::string* err) {
  c_->launches++;
  while (c_->block_launch.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (c_->fail_launch.load()) {
    *err = "emulated launch failure";
    return false;
  }
  if (thread_.joinable()) thread_.join();  // the last generation has exited
  ctas_ = std::min(ctas, gpu::kServiceMaxCtas);
  thread_ = std::thread([this, generation] { kernel(generation); });
  return true;
}

bool EmulatedServiceDevice::reap(std::string*) {
  if (thread_.joinable()) thread_.join();
  return true;
}

void EmulatedServiceDevice::kernel(uint32_t generation) {
  std::this_thread::sleep_for(std::chrono::microseconds(c_->start_delay_us.load()));
  const int now = ++c_->running;
  int seen = c_->max_running.load();
  while (now > seen && !c_->max_running.compare_exchange_weak(seen, now)) {
  }
  __atomic_store_n(&host_->started, generation, __ATOMIC_RELEASE);
  for (;;) {
    const uint64_t tail = __atomic_load_n(&host_->tail, __ATOMIC_ACQUIRE);
    const uint64_t stop = __atomic_load_n(&host_->stop, __ATOMIC_ACQUIRE);
    if (head_ < tail) {
      run_job(head_, tail - head_ == 1);
      ++head_;
      continue;
    }
    if ((stop & gpu::kServiceStop) && head_ >= (stop & ~gpu::kServiceStop) && !c_->ignore_stop.load()) break;
    std::this_thread::sleep_for(std::chrono::microseconds(5));
  }
  --c_->running;
  __atomic_store_n(&host_->exited, generation, __ATOMIC_RELEASE);
}

// As resident.cu: refusals first, then the CPU codec in place of the GPU's (whose messages are
// the same bytes), its time the tile time of every CTA; an encode alone whose small tiles would
// be no more than the CTAs says it took those. raw_header_only is not emulated.
void EmulatedServiceDevice::run_job(uint64_t index, bool alone) {
  std::this_thread::sleep_for(std::chrono::microseconds(c_->job_wait_us.load()));
  const gpu::ServiceJob j = gpu::unposted(host_->jobs[index % gpu::kServiceRing]);
  const int64_t t0 = now_ns();
  gpu::JobTimes& times = host_->times[index % gpu::kServiceRing];  // the host's clock stands for the GPU's
  times.taken = times.start = uint64_t(t0);
  gpu::Result r{};
  size_t len = 0;
  Status s;
  if (j.op != gpu::kServiceEncode && j.op != gpu::kServiceDecode) {
    s = Status::kBadHeader;
  } else if (j.op == gpu::kServiceEncode) {
    if (j.in_bytes > gpu::kServiceMaxJob) {
      s = Status::kTooLarge;
    } else {
      const Codec c = j.auto_codec ? classify(j.in, j.in_bytes) : static_cast<Codec>(j.codec);
      EncodeOptions opt;
      opt.checksum = j.checksum;
      opt.max_ratio = j.in_bytes ? double(j.limit - kHeaderBytes) / double(j.in_bytes) : 1.0;
      s = encode(c, j.in, j.in_bytes, j.out, j.out_cap, &len, opt);
    }
  } else if (j.out_cap > gpu::kServiceMaxJob) {
    s = Status::kNoSpace;
  } else {
    s = decode(j.in, j.in_bytes, j.out, j.out_cap, &len);
    if (j.in_host) c_->host_decodes++;
  }
  if (s == Status::kOk) {  // the message's codec, from its header
    Header h;
    std::memcpy(&h, j.op == gpu::kServiceEncode ? j.out : j.in, sizeof h);
    r.codec = h.codec;
  }
  r.bytes = s == Status::kOk ? len : 0;
  r.status = static_cast<int32_t>(s);
  if (j.op == gpu::kServiceEncode || j.op == gpu::kServiceDecode) {
    const int op = j.op == gpu::kServiceEncode ? 0 : 1;
    const uint64_t dt = uint64_t(now_ns() - t0);
    for (int c = 0; c < ctas_; ++c) __atomic_fetch_add(&host_->tile_ns[c][op], dt, __ATOMIC_RELAXED);
  }
  gpu::Result& out = host_->results[index % gpu::kServiceRing];
  out.bytes = r.bytes;
  out.status = r.status;
  out.codec = r.codec;
  out.raw_from_input = 0;
  out.small_tiles = j.op == gpu::kServiceEncode && alone && gpu::service_small_tiles(j.in_bytes, uint32_t(ctas_));
  c_->small_tile_jobs += out.small_tiles;
  times.end = uint64_t(now_ns());
  c_->jobs++;
  __atomic_store_n(&out.done, uint8_t(1), __ATOMIC_RELEASE);
}

}  // namespace zipccl
