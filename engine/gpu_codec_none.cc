// A build without the GPU codec (ZIPCCL_CUDA off): device buffers are not offered to NCCL.
#include "codec_engine.h"
#include "resident_codec.h"

namespace zipccl {

bool gpu_codec_usable(const char** why) {
  *why = "this build has no GPU codec (ZIPCCL_CUDA=OFF)";
  return false;
}
CodecEngine* acquire_gpu_codec(int) { return nullptr; }
void release_gpu_codec(int) {}
char* alloc_pinned(size_t) { return nullptr; }
void free_pinned(char*) {}
std::unique_ptr<ServiceDevice> make_cuda_service_device(int, std::string* err) {
  *err = "this build has no GPU codec (ZIPCCL_CUDA=OFF)";
  return nullptr;
}

}  // namespace zipccl
