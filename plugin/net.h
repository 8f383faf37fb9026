// The one implementation behind every exported ncclNet_vN: version-neutral entry points that the
// per-version adapters (net_v8.cc .. net_v11.cc) translate to. Contexts: v11 passes one per
// communicator; older versions use the process context (ctx = nullptr here).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_abi.h"

namespace zipccl::net {

constexpr const char* kName = "Zip";

struct Props {
  char* name;
  char* pci_path;  // null for virtual interfaces
  uint64_t guid;
  int port;
  int ptr_support;
  int speed_mbps;
  int max_comms;
  int max_recvs;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
};

// traffic_class: the v11 init config's (-1: none); v10 passes one per connect instead.
ncclResult_t init(ncclDebugLogger_t logger, uint64_t comm_id, void** ctx, int traffic_class = -1);
ncclResult_t finalize(void* ctx);
ncclResult_t devices(int* ndev);
ncclResult_t properties(int dev, Props* props);
ncclResult_t listen(void* ctx, int dev, void* handle, void** listen_comm);
ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm, int traffic_class = -1);
ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_t** dev_comm);
ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle);
ncclResult_t dereg_mr(void* comm, void* mhandle);
ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
// *request on entry: NCCL_NET_OPTIONAL_RECV_COMPLETION marks an LL/LL128 receive (v9+).
ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                   void** mhandles, void** request);
ncclResult_t iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t test(void* request, int* done, int* sizes);
ncclResult_t close_send(void* send_comm);
ncclResult_t close_recv(void* recv_comm);
ncclResult_t close_listen(void* listen_comm);
ncclResult_t set_net_attr(void* ctx, ncclNetAttr_t* attr);

// What the tuner (tuner/) plans with: the network path as every rank configured alike sees it.
// NCCL runs a collective only if all ranks pick the same algorithm, protocol and channels, and
// each rank's tuner picks alone, so nothing here is measured at run time (a rank's own link
// meter, codec speed or compression ratio would differ from its peers' and split the choice).
struct PathView {
  bool enabled = false;   // compression not off
  // Device 0's speed (NCCL_ZIP_LINK_MBPS, else what it reports), bytes/s; 0 where that is a guess
  // (lo): NCCL's choice stands, as the comms compress nothing until they have measured the link.
  double link_bps = 0;
  double codec_bps = 0;   // nominal_coding_rate() of the codec host buffers get, bytes/s
  bool codec_keeps_up = false;  // the send comms compress (auto: engine/policy.h's rule; always)
};
PathView path_view();
// The tuner sends a collective compressed (NCCL is enqueueing it): with NCCL_ZIP_GPU_PREWARM, the
// resident codecs start their kernels now. On the application's thread: no CUDA call.
void expect_compressed();

// The forms of v8-v10, which have no context and no device offload.
ncclResult_t listen_noctx(int dev, void* handle, void** listen_comm);
ncclResult_t connect_noctx(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_t** dev_comm);

}  // namespace zipccl::net
