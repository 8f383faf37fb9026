// The process's GPU codec engines, one per CUDA device, created by the first comm that registers
// that device's memory and destroyed with the last.
#include <map>
#include <mutex>
#include <string>

#include "engine_params.h"
#include "gpu_codec_engine.h"
#include "log.h"

namespace zipccl {
namespace {

std::mutex g_mu;
struct Entry {
  GpuCodecEngine* engine;
  int refs;
};
std::map<int, Entry> g_engines;

}  // namespace

bool gpu_codec_usable(const char** why) {
  if (gpu_enabled() < 2) {
    *why = "NCCL_ZIP_GPU < 2; NCCL stages device data through host buffers";
    return false;
  }
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    static std::string text;  // init() runs this once per process
    text = std::string("no usable CUDA device: cudaGetDeviceCount says ") +
           (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    *why = text.c_str();
    return false;
  }
  *why = "";
  return true;
}

CodecEngine* acquire_gpu_codec(int device) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_engines.find(device);
  if (it != g_engines.end()) {
    ++it->second.refs;
    return it->second.engine;
  }
  auto* e = new GpuCodecEngine(device);
  std::string err;
  if (!e->init(&err)) {
    ZIP_WARN("GPU codec engine on device %d: %s", device, err.c_str());
    delete e;
    return nullptr;
  }
  g_engines[device] = Entry{e, 1};
  return e;
}

void release_gpu_codec(int device) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_engines.find(device);
  if (it == g_engines.end() || --it->second.refs > 0) return;
  delete it->second.engine;
  g_engines.erase(it);
}

}  // namespace zipccl
