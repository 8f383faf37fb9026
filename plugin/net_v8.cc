// ncclNet_v8 (NCCL 2.20-2.23): int sizes, no context, no LL hint on irecv.
#include "adapter.h"
#include "transport.h"

namespace zipccl::net {
namespace {

ncclResult_t init_v8(ncclDebugLogger_t logger) { return init(logger, 0, nullptr); }
ncclResult_t props_v8(int dev, ncclNetProperties_v8_t* p) { return fill_props_v8(dev, p); }
ncclResult_t isend_v8(void* sc, void* data, int size, int tag, void* mh, void** req) {
  if (size < 0) return ncclInvalidArgument;
  return isend(sc, data, size_t(size), tag, mh, req);
}
ncclResult_t irecv_v8(void* rc, int n, void** data, int* sizes, int* tags, void** mhs, void** req) {
  size_t s[kMaxRecvs];
  if (n < 1 || n > int(kMaxRecvs)) return ncclInvalidArgument;
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    s[i] = size_t(sizes[i]);
  }
  *req = nullptr;  // v8 NCCL never sets the LL hint; whatever is there is not one
  return irecv(rc, n, data, s, tags, mhs, req);
}

}  // namespace
}  // namespace zipccl::net

using namespace zipccl::net;

extern "C" {
ZIP_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = {
    kName,         init_v8,     devices,    props_v8,   listen_noctx, connect_noctx, accept,
    reg_mr,        reg_mr_dmabuf, dereg_mr, isend_v8,   irecv_v8,     iflush,        test,
    close_send,    close_recv,  close_listen,
    nullptr,       // getDeviceMr: no device offload
    nullptr,       // irecvConsumed
};
}  // extern "C"
