// A build without CUDA: no GPU probes.
#include "probes.h"

namespace zipccl::doctor {

std::vector<Gpu> probe_gpus(Report* r) {
  r->add("gpu", Level::kWarn, "this build has no CUDA (ZIPCCL_CUDA=OFF): GPUs and the GPU codec not checked");
  return {};
}

}  // namespace zipccl::doctor
