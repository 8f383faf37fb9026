// ncclNet_v11 (NCCL 2.28-2.29): a context per communicator (init/finalize, joined on commId) and
// setNetAttr saying which protocol the current collective uses; the init config's traffic class
// applies to the communicator's connections. Profiler handles are ignored.
#include "adapter.h"

namespace zipccl::net {
namespace {

ncclResult_t init_v11(void** ctx, uint64_t comm_id, ncclNetCommConfig_t* config, ncclDebugLogger_t logger,
                      ncclProfilerCallback_t) {
  return init(logger, comm_id, ctx, config ? config->trafficClass : -1);
}
ncclResult_t props_v11(int dev, ncclNetProperties_v11_t* p) {
  ncclResult_t r = fill_props_v9(dev, p);
  p->maxMultiRequestSize = 1;
  return r;
}
ncclResult_t connect_v11(void* ctx, int dev, void* handle, void** sc, ncclNetDeviceHandle_t**) {
  return connect(ctx, dev, handle, sc);
}
ncclResult_t isend_v11(void* sc, void* data, size_t size, int tag, void* mh, void*, void** req) {
  return isend(sc, data, size, tag, mh, req);
}
ncclResult_t irecv_v11(void* rc, int n, void** data, size_t* sizes, int* tags, void** mhs, void**, void** req) {
  return irecv(rc, n, data, sizes, tags, mhs, req);
}

}  // namespace
}  // namespace zipccl::net

using namespace zipccl::net;

extern "C" {
ZIP_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    kName,         init_v11,    devices,    props_v11,  listen,       connect_v11,   accept,
    reg_mr,        reg_mr_dmabuf, dereg_mr, isend_v11,  irecv_v11,    iflush,        test,
    close_send,    close_recv,  close_listen,
    nullptr,       // getDeviceMr: no device offload
    nullptr,       // irecvConsumed
    nullptr,       // makeVDevice
    finalize,      set_net_attr,
};
}  // extern "C"
