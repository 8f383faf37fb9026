#include "resident_gpus.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "emulated_service.h"
#include "engine_params.h"
#include "log.h"
#include "mapped_memfd.h"
#include "policy.h"

namespace zipccl {
namespace {

constexpr double kCtaCodingBps = 0.65e9;
constexpr int kMinCtas = 4, kMaxCtas = 16;
// Waits in vain for a stopped kernel, at the least, that the last release warns of (a few come
// of a start now and then slower than the wait, e.g. behind an application's kernels).
constexpr uint64_t kVainWaitsWarn = 8;

std::atomic<double> g_link_bps{0};  // read by make() under g_mu: its own atomic
std::atomic<bool> g_device_staging{false};
std::mutex g_mu;
struct Entry {
  std::unique_ptr<ResidentGpu> gpu;
  int refs;
};
std::map<int, Entry> g_gpus;

// Under emulation host memory plays device staging: a memfd mapped here, the fd its DMA-BUF.
void add_emulated_device_arena(ResidentGpu* g, size_t bytes) {
  auto mem = std::make_shared<MappedMemfd>("zipccl-emulated-device-staging", bytes);
  if (!mem->ok()) {
    ZIP_WARN("GPU codec (emulated): no device staging (%s); device buffers are sent raw", mem->error().c_str());
    return;
  }
  // The arena holds the mapping; the fd goes where a real arena's DMA-BUF goes.
  g->device_arena = std::make_shared<StagingArena>(mem->data(), bytes, [mem](char*) {});
  g->device_arena_fd = mem->release_fd();
}

// Device staging of the same size as the pinned arena; without it device buffers go raw.
void add_device_arena(ResidentGpu* g, size_t bytes) {
  if (g->emulation) return add_emulated_device_arena(g, bytes);
  std::string err;
  char* mem = alloc_device(g->device, bytes, &err);
  if (!mem) {
    ZIP_WARN("GPU codec on GPU %d: no device staging (%s); device buffers are sent raw", g->device, err.c_str());
    return;
  }
  const int device = g->device;
  g->device_arena = std::make_shared<StagingArena>(mem, bytes, [device](char* p) { free_device(device, p); });
  std::string why;
  g->device_arena_fd = export_dmabuf(device, mem, bytes, &why);
  ZIP_INFO(NCCL_INIT | NCCL_NET, "GPU codec on GPU %d: %zu MiB device staging for GPUDirect buffers, %s%s", device,
           bytes >> 20, g->device_arena_fd >= 0 ? "exported as a DMA-BUF" : "no DMA-BUF: ", why.c_str());
}

ResidentGpu* make(int device) {
  const bool emulate = gpu_emulate() != 0;
  const int ctas = resident_ctas();
  const size_t arena_bytes = size_t(gpu_staging_mb()) << 20;
  std::string err;
  std::unique_ptr<ServiceDevice> dev;
  char* mem = nullptr;
  std::function<void(char*)> free_mem;
  std::shared_ptr<EmulatedServiceDevice::Control> emulation;
  if (emulate) {
    emulation = std::make_shared<EmulatedServiceDevice::Control>();
    emulation->block_launch = gpu_emulate() == 2;
    emulation->start_delay_us = gpu_emulate_start_us();
    dev = std::make_unique<EmulatedServiceDevice>(emulation);
    mem = new char[arena_bytes];
    free_mem = [](char* p) { delete[] p; };
  } else {
    dev = make_cuda_service_device(device, ctas, &err);
    if (dev) mem = alloc_mapped(arena_bytes, &err);
    free_mem = free_mapped;
  }
  if (!dev || !mem) {
    ZIP_WARN("GPU codec on GPU %d unavailable: %s; host buffers are coded on the CPU", device, err.c_str());
    return nullptr;
  }
  ResidentCodec::Options o;
  o.ctas = dev->launch_ctas(ctas);
  o.idle_us = gpu_idle_us();
  o.start_grace_us = gpu_wait_us();
  auto g = std::make_unique<ResidentGpu>();
  g->device = device;
  g->codec = ResidentCodec::create(std::move(dev), o);
  g->arena = std::make_shared<StagingArena>(mem, arena_bytes, free_mem);
  // Forced compression (NCCL_ZIP_ENABLE=2) takes the CPU when the GPU is not at hand; auto
  // sends those messages raw (a CPU codec is slower than the links it would pay on).
  g->engine = std::make_unique<ResidentEngine>(g->codec, acquire_cpu_codec(), zip_mode() == ZipMode::kAlways);
  g->emulation = emulation;
  if (g_device_staging.load()) add_device_arena(g.get(), arena_bytes);
  const std::string where = g->codec->placement().empty() ? "" : " " + g->codec->placement();
  ZIP_INFO(NCCL_INIT | NCCL_NET,
           "GPU codec on GPU %d: resident kernel of %d CTAs (%d %s%s)%s%s, exits after %lld us idle; %zu MiB pinned "
           "staging; host buffers coded there while it runs, on the CPU otherwise",
           device, o.ctas, ctas, gpu_ctas() ? "NCCL_ZIP_GPU_CTAS" : "sized to the link",
           o.ctas > ctas ? ", more to fill the SMs held" : "", where.c_str(),
           emulate ? " (emulated by a CPU thread, NCCL_ZIP_GPU_EMULATE)" : "",
           (long long)o.idle_us, arena_bytes >> 20);
  return g.release();
}

}  // namespace

bool resident_usable(const char** why) {
  static std::string text;  // init() asks once per process
  if (gpu_enabled() == 0) {
    *why = "NCCL_ZIP_GPU=0";
    return false;
  }
  if (gpu_emulate()) return true;
  if (!cuda_device_present(&text)) {
    *why = text.c_str();
    return false;
  }
  return true;
}

int resident_device() { return gpu_emulate() ? 0 : current_cuda_device(); }

ResidentGpu* acquire_resident(int device) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_gpus.find(device);
  if (it != g_gpus.end()) {
    ++it->second.refs;
    return it->second.gpu.get();
  }
  ResidentGpu* gpu = make(device);
  if (!gpu) return nullptr;
  g_gpus[device] = Entry{std::unique_ptr<ResidentGpu>(gpu), 1};
  return gpu;
}

void set_resident_link(double link_bps) { g_link_bps.store(link_bps); }

void set_resident_device_staging(bool on) { g_device_staging.store(on); }

int resident_ctas() {
  if (gpu_ctas() > 0) return int(gpu_ctas());
  const double link = g_link_bps.load();
  if (link <= 0) return kMaxCtas;
  const double need = kCodecMargin * link / kCtaCodingBps;
  return std::clamp(int(need) + 1, kMinCtas, kMaxCtas);
}

double nominal_coding_rate(bool resident) {
  return resident ? resident_ctas() * kCtaCodingBps : double(cpu_threads()) * 1e9;
}

void prewarm_residents() {
  std::lock_guard<std::mutex> g(g_mu);
  for (auto& e : g_gpus) e.second.gpu->codec->prewarm();
}

void release_resident(int device, uint64_t waits, uint64_t vain) {
  std::unique_ptr<ResidentGpu> gone;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_gpus.find(device);
    if (it == g_gpus.end()) return;
    it->second.gpu->cold_waits += waits;
    it->second.gpu->vain_waits += vain;
    if (--it->second.refs > 0) return;
    gone = std::move(it->second.gpu);
    g_gpus.erase(it);
  }
  if (const uint64_t bursts = gone->engine->bursts())
    ZIP_INFO(NCCL_NET,
             "GPU codec on GPU %d: a burst's first job took %.0f us beyond its own time (moving average of %llu "
             "bursts), counted as queued while a burst is that young",
             device, gone->engine->start_seconds() * 1e6, (unsigned long long)bursts);
  gone->engine.reset();  // waits for the jobs the kernel still codes
  release_cpu_codec();
  if (gone->device_arena_fd >= 0) close(gone->device_arena_fd);  // registrations hold the DMA-BUF itself
  if (gone->emulation) gone->emulation->block_launch = false;  // a hung emulated launch returns
  if (gone->codec->shutdown()) {
    const std::string starts = gone->codec->start_summary();
    if (!starts.empty()) ZIP_INFO(NCCL_NET, "GPU codec on GPU %d: resident kernel %s", device, starts.c_str());
    // Where the kernel mostly starts later than the wait, auto mode sends raw what it would have
    // compressed (the wait's pause grows after each wait in vain): the user can lengthen the wait.
    if (gone->vain_waits >= kVainWaitsWarn && 2 * gone->vain_waits >= gone->cold_waits)
      ZIP_WARN("GPU codec on GPU %d: %llu of %llu waits for its stopped kernel ran out (NCCL_ZIP_GPU_WAIT_US=%lld; "
               "its starts took %lld us median, p90 %lld): messages it would have compressed went raw; a wait "
               "above the starts' p90 keeps them compressed",
               device, (unsigned long long)gone->vain_waits, (unsigned long long)gone->cold_waits,
               (long long)gpu_wait_us(), (long long)gone->codec->start_us(0.5), (long long)gone->codec->start_us(0.9));
  }
}

}  // namespace zipccl
