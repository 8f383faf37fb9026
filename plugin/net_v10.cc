// ncclNet_v10 (NCCL 2.26-2.27): profiler callback at init, a connect config (traffic class: the
// verbs transport's QPs use it, TCP ignores it), profiler handles on isend/irecv (no profiler
// events emitted yet).
#include "adapter.h"

namespace zipccl::net {
namespace {

ncclResult_t init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t) { return init(logger, 0, nullptr); }
ncclResult_t props_v10(int dev, ncclNetProperties_v10_t* p) { return fill_props_v9(dev, p); }
ncclResult_t connect_v10(int dev, ncclNetCommConfig_t* config, void* handle, void** sc, ncclNetDeviceHandle_t**) {
  return connect(nullptr, dev, handle, sc, config ? config->trafficClass : -1);
}
ncclResult_t isend_v10(void* sc, void* data, size_t size, int tag, void* mh, void*, void** req) {
  return isend(sc, data, size, tag, mh, req);
}
ncclResult_t irecv_v10(void* rc, int n, void** data, size_t* sizes, int* tags, void** mhs, void**, void** req) {
  return irecv(rc, n, data, sizes, tags, mhs, req);
}

}  // namespace
}  // namespace zipccl::net

using namespace zipccl::net;

extern "C" {
ZIP_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {
    kName,         init_v10,    devices,    props_v10,  listen_noctx, connect_v10,   accept,
    reg_mr,        reg_mr_dmabuf, dereg_mr, isend_v10,  irecv_v10,    iflush,        test,
    close_send,    close_recv,  close_listen,
    nullptr,       // getDeviceMr: no device offload
    nullptr,       // irecvConsumed
    nullptr,       // makeVDevice
};
}  // extern "C"
