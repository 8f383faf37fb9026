// A build without CUDA (ZIPCCL_CUDA off): host buffers are coded on the CPU (or by the emulated
// resident kernel, NCCL_ZIP_GPU_EMULATE=1); no CUDA device is seen.
#include "resident_codec.h"
#include "resident_gpus.h"

namespace zipccl {

std::unique_ptr<ServiceDevice> make_cuda_service_device(int, int, std::string* err) {
  *err = "this build has no GPU codec (ZIPCCL_CUDA=OFF)";
  return nullptr;
}
bool cuda_device_present(std::string* why) {
  *why = "this build has no GPU codec (ZIPCCL_CUDA=OFF)";
  return false;
}
int current_cuda_device() { return -1; }
char* alloc_mapped(size_t, std::string* err) {
  *err = "this build has no GPU codec (ZIPCCL_CUDA=OFF)";
  return nullptr;
}
void free_mapped(char*) {}
char* alloc_device(int, size_t, std::string* err) {
  *err = "this build has no GPU codec (ZIPCCL_CUDA=OFF)";
  return nullptr;
}
void free_device(int, char*) {}
int export_dmabuf(int, char*, size_t, std::string* err) {
  *err = "this build has no GPU codec (ZIPCCL_CUDA=OFF)";
  return -1;
}

}  // namespace zipccl
