// ncclNet_v9 (NCCL 2.24-2.25): size_t sizes, LL hint preset in *request on irecv. Every entry
// point already has the internal form.
#include "adapter.h"

namespace zipccl::net {
namespace {

ncclResult_t init_v9(ncclDebugLogger_t logger) { return init(logger, 0, nullptr); }
ncclResult_t props_v9(int dev, ncclNetProperties_v9_t* p) { return fill_props_v9(dev, p); }

}  // namespace
}  // namespace zipccl::net

using namespace zipccl::net;

extern "C" {
ZIP_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {
    kName,         init_v9,     devices,    props_v9,   listen_noctx, connect_noctx, accept,
    reg_mr,        reg_mr_dmabuf, dereg_mr, isend,      irecv,        iflush,        test,
    close_send,    close_recv,  close_listen,
    nullptr,       // getDeviceMr: no device offload
    nullptr,       // irecvConsumed
    nullptr,       // makeVDevice: NCCL then does without virtual NICs
};
}  // extern "C"
