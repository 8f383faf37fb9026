#include "net.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include "engine_params.h"
#include "guarded.h"
#include "log.h"
#include "policy.h"
#include "recv_comm.h"
#include "registration.h"
#include "resident_gpus.h"
#include "send_comm.h"
#include "transport_select.h"

namespace zipccl::net {
namespace {

// NCCL's handle: the transport's part, then our connect state. connect() is called again with
// the same handle until it returns a comm, so the in-progress connector is named there (as NCCL's
// own socket transport does); the listener leaves it zeroed for the peer. The name is used only
// if it is one of our live connectors: bytes we did not write are never dereferenced.
struct Handle {
  uint8_t transport[kTransportHandleBytes];
  Connector* connecting;
  uint64_t reserved;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle fits NCCL's");

struct CtxRef {
  std::shared_ptr<NetCtx> ctx;
};

struct ListenComm {
  int dev;
  std::shared_ptr<NetCtx> ctx;
  std::unique_ptr<Listener> listener;
};

std::mutex g_mu;
std::unique_ptr<Transport> g_transport;  // created by the first init, kept for the process
std::shared_ptr<NetCtx> g_process_ctx;
DevicePath g_device_path;                // decided by the first init
std::set<const Connector*> g_connecting;  // under g_mu

std::shared_ptr<NetCtx> ctx_of(void* ctx) {
  return ctx ? static_cast<CtxRef*>(ctx)->ctx : g_process_ctx;
}

// Device dev's speed as configured, bytes/s: NCCL_ZIP_LINK_MBPS, else what the device reports.
double reported_link_bps(int dev) {
  return double(link_mbps() > 0 ? link_mbps() : g_transport->device(dev).speed_mbps) * 1e6 / 8;
}

// What the comms' policy and offer gate plan with: the reported speed, or 0 where it is a guess
// (planning_link_bps(): the link meter's alone).
double planning_reported_bps(int dev) {
  return link_mbps() > 0 || g_transport->device(dev).speed_known ? reported_link_bps(dev) : 0;
}

const char* mode_name(ZipMode m) {
  return m == ZipMode::kOff ? "off (plain transport)" : m == ZipMode::kAuto ? "auto" : "always";
}

// NCCL reads NCCL_MIN_NCHANNELS when it builds a communicator's channels, after its net plugin's
// first init: set here, it applies to every communicator (as aws-ofi-nccl sets its platform's
// defaults). A value the user set, in the environment or NCCL's config file (NCCL loads that into
// the environment before), stands. Raised with compression off too: the channels decide the order
// of NCCL's floating-point sums over more than two ranks, so NCCL_ZIP_ENABLE=0 stays a
// bit-identical baseline for the same job compressed.
void raise_channel_floor() {
  if (!g_device_path.resident || gpu_min_channels() == 0) return;
  if (getenv("NCCL_MIN_NCHANNELS") || getenv("NCCL_MIN_NRINGS")) return;
  setenv("NCCL_MIN_NCHANNELS", std::to_string(gpu_min_channels()).c_str(), 0);
  ZIP_INFO(NCCL_INIT | NCCL_NET, "GPU codec: set NCCL_MIN_NCHANNELS=%lld (NCCL_ZIP_GPU_MIN_CHANNELS): the GPU "
           "codec pays with several messages in flight", (long long)gpu_min_channels());
}

}  // namespace

ncclResult_t init(ncclDebugLogger_t logger, uint64_t comm_id, void** ctx, int traffic_class) {
  return guarded("init", [&]() -> ncclResult_t {
    set_logger(logger);
    std::lock_guard<std::mutex> g(g_mu);
    if (!g_transport) {
      g_transport = select_transport();
      if (!g_transport) return ncclInternalError;
      g_process_ctx = std::make_shared<NetCtx>();
      std::string devs;
      for (int d = 0; d < g_transport->num_devices(); ++d) {
        const DeviceInfo& i = g_transport->device(d);
        const std::string port = i.port ? ":" + std::to_string(i.port) : "";
        devs += " [" + std::to_string(d) + "]" + i.name + port + " (" + std::to_string(i.speed_mbps) + " Mb/s" +
                (i.speed_known ? ")" : ", a guess: auto mode compresses once the link is measured)");
      }
      ZIP_INFO(NCCL_INIT | NCCL_NET, "%s transport, devices:%s; compression %s, %s", g_transport->name(),
               devs.c_str(), mode_name(zip_mode()), g_transport->settings().c_str());
      g_device_path = decide_device_path(*g_transport);
      if (g_transport->num_devices() > 0) set_resident_link(reported_link_bps(0));
      raise_channel_floor();
    }
    if (g_transport->num_devices() == 0) {
      ZIP_WARN("no usable network interface (NCCL_SOCKET_IFNAME=%s NCCL_SOCKET_FAMILY=%s)",
               socket_ifname().c_str(), socket_family().c_str());
      return ncclInternalError;
    }
    if (ctx) {
      auto* ref = new CtxRef{std::make_shared<NetCtx>()};
      ref->ctx->comm_id = comm_id;
      ref->ctx->traffic_class = traffic_class;
      *ctx = ref;
    }
    return ncclSuccess;
  });
}

ncclResult_t finalize(void* ctx) {
  return guarded("finalize", [&]() -> ncclResult_t {
    auto* ref = static_cast<CtxRef*>(ctx);
    if (!ref) return ncclSuccess;
    ZIP_INFO(NCCL_NET, "communicator %016llx: %s", (unsigned long long)ref->ctx->comm_id,
             ref->ctx->totals.summary().c_str());
    delete ref;
    return ncclSuccess;
  });
}

PathView path_view() {
  PathView v;
  bool resident = false;
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (!g_transport || g_transport->num_devices() == 0) return v;
    v.link_bps = planning_reported_bps(0);
    resident = g_device_path.resident;
  }
  v.enabled = zip_mode() != ZipMode::kOff;
  v.codec_bps = nominal_coding_rate(resident);
  v.codec_keeps_up = zip_mode() == ZipMode::kAlways || codec_keeps_up(v.codec_bps, v.link_bps);
  return v;
}

void expect_compressed() {
  if (!gpu_prewarm()) return;
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (!g_device_path.resident) return;
  }
  prewarm_residents();
}

ncclResult_t devices(int* ndev) {
  return guarded("devices", [&]() -> ncclResult_t {
    *ndev = g_transport->num_devices();
    return ncclSuccess;
  });
}

ncclResult_t properties(int dev, Props* p) {
  return guarded("properties", [&]() -> ncclResult_t {
    if (dev < 0 || dev >= g_transport->num_devices()) return ncclInvalidArgument;
    const DeviceInfo& d = g_transport->device(dev);
    p->name = const_cast<char*>(d.name.c_str());
    p->pci_path = d.pci_path.empty() ? nullptr : const_cast<char*>(d.pci_path.c_str());
    p->guid = d.guid;
    p->port = d.port;
    // Device buffers only where the HCA moves them (GPUDirect RDMA), the ways it supports, as
    // NCCL's net_ib; otherwise NCCL stages GPU data through host buffers.
    p->ptr_support = NCCL_PTR_HOST;
    if (g_device_path.gdr && d.gdr_peermem) p->ptr_support |= NCCL_PTR_CUDA;
    if (g_device_path.gdr && d.gdr_dmabuf) p->ptr_support |= NCCL_PTR_DMABUF;
    p->speed_mbps = d.speed_mbps;
    p->max_comms = d.max_comms;
    p->max_recvs = int(kMaxRecvs);
    p->max_p2p_bytes = kMaxMessageBytes;
    p->max_coll_bytes = kMaxMessageBytes;
    return ncclSuccess;
  });
}

ncclResult_t listen(void* ctx, int dev, void* handle, void** listen_comm) {
  return guarded("listen", [&]() -> ncclResult_t {
    *listen_comm = nullptr;
    if (dev < 0 || dev >= g_transport->num_devices()) return ncclInvalidArgument;
    auto* h = static_cast<Handle*>(handle);
    std::memset(h, 0, sizeof *h);
    auto lc = std::make_unique<ListenComm>();
    lc->dev = dev;
    lc->ctx = ctx_of(ctx);
    ZIP_CHECK(g_transport->listen(dev, h->transport, &lc->listener));
    *listen_comm = lc.release();
    return ncclSuccess;
  });
}

ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm, int traffic_class) {
  return guarded("connect", [&]() -> ncclResult_t {
    *send_comm = nullptr;
    if (dev < 0 || dev >= g_transport->num_devices()) return ncclInvalidArgument;
    auto* h = static_cast<Handle*>(handle);
    bool ours;
    {
      std::lock_guard<std::mutex> g(g_mu);
      ours = g_connecting.count(h->connecting) > 0;
    }
    if (!ours) {
      std::unique_ptr<Connector> c;
      const int tc = traffic_class >= 0 ? traffic_class : ctx_of(ctx)->traffic_class;
      ZIP_CHECK(g_transport->connect(dev, h->transport, tc, &c));
      h->connecting = c.release();
      std::lock_guard<std::mutex> g(g_mu);
      g_connecting.insert(h->connecting);
    }
    std::unique_ptr<Link> link;
    const ncclResult_t r = h->connecting->progress(&link);
    if (r != ncclSuccess || link) {
      {
        std::lock_guard<std::mutex> g(g_mu);
        g_connecting.erase(h->connecting);
      }
      delete h->connecting;
      h->connecting = nullptr;
    }
    if (r != ncclSuccess || !link) return r;
    *send_comm = new SendComm(dev, ctx_of(ctx), std::move(link), planning_reported_bps(dev));
    return ncclSuccess;
  });
}

ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_t**) {
  return guarded("accept", [&]() -> ncclResult_t {
    *recv_comm = nullptr;
    auto* lc = static_cast<ListenComm*>(listen_comm);
    std::unique_ptr<Link> link;
    ZIP_CHECK(lc->listener->accept(&link));
    if (link) *recv_comm = new RecvComm(lc->dev, lc->ctx, std::move(link));
    return ncclSuccess;
  });
}

// regMr and regMrDmaBuf (fd >= 0: device memory exported by CUDA).
ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return guarded("reg_mr", [&]() -> ncclResult_t {
    auto* c = static_cast<Comm*>(comm);
    return register_buffer(c, g_transport->device(c->dev()), g_device_path, data, size, type == NCCL_PTR_CUDA, -1, 0,
                           reinterpret_cast<Mr**>(mhandle));
  });
}

ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  return guarded("reg_mr_dmabuf", [&]() -> ncclResult_t {
    auto* c = static_cast<Comm*>(comm);
    return register_buffer(c, g_transport->device(c->dev()), g_device_path, data, size, type == NCCL_PTR_CUDA, fd,
                           offset, reinterpret_cast<Mr**>(mhandle));
  });
}

ncclResult_t dereg_mr(void*, void* mhandle) {
  return guarded("dereg_mr", [&]() -> ncclResult_t {
    deregister_buffer(static_cast<Mr*>(mhandle));
    return ncclSuccess;
  });
}

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return guarded("isend", [&]() -> ncclResult_t {
    auto* c = static_cast<SendComm*>(send_comm);
    std::lock_guard<std::mutex> g(c->mutex());
    return c->isend(data, size, tag, static_cast<Mr*>(mhandle), request);
  });
}

ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                   void** mhandles, void** request) {
  return guarded("irecv", [&]() -> ncclResult_t {
    auto* c = static_cast<RecvComm*>(recv_comm);
    const bool flag_polled = *request == reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);
    std::lock_guard<std::mutex> g(c->mutex());
    return c->irecv(n, data, sizes, tags, mhandles, flag_polled, request);
  });
}

ncclResult_t iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return guarded("iflush", [&]() -> ncclResult_t {
    // Host memory is written (by the transport, a CPU or the resident GPU codec) before test()
    // reports the receive; GPUDirect writes need a flush (as NCCL's net_ib: one, for the last
    // non-empty receive).
    *request = nullptr;
    int last = -1;
    for (int i = 0; i < n; ++i)
      if (sizes[i]) last = i;
    const Mr* mr = last >= 0 && mhandles ? static_cast<const Mr*>(mhandles[last]) : nullptr;
    if (!mr || !mr->flushed) return ncclSuccess;
    auto* c = static_cast<RecvComm*>(recv_comm);
    std::lock_guard<std::mutex> g(c->mutex());
    return c->iflush(data[last], request);
  });
}

ncclResult_t test(void* request, int* done, int* sizes) {
  return guarded("test", [&]() -> ncclResult_t {
    Comm* c = static_cast<Request*>(request)->comm;
    std::lock_guard<std::mutex> g(c->mutex());
    return c->test(static_cast<Request*>(request), done, sizes);
  });
}

ncclResult_t close_send(void* send_comm) {
  return guarded("close_send", [&]() -> ncclResult_t {
    auto* c = static_cast<SendComm*>(send_comm);
    c->log_summary();
    delete c;
    return ncclSuccess;
  });
}

ncclResult_t close_recv(void* recv_comm) {
  return guarded("close_recv", [&]() -> ncclResult_t {
    auto* c = static_cast<RecvComm*>(recv_comm);
    c->log_summary();
    delete c;
    return ncclSuccess;
  });
}

ncclResult_t close_listen(void* listen_comm) {
  return guarded("close_listen", [&]() -> ncclResult_t {
    delete static_cast<ListenComm*>(listen_comm);
    return ncclSuccess;
  });
}

ncclResult_t set_net_attr(void* ctx, ncclNetAttr_t* attr) {
  return guarded("set_net_attr", [&]() -> ncclResult_t {
    auto c = ctx_of(ctx);
    if (!attr || !c) return ncclSuccess;
    // Protocol bits are only meaningful for collectives (ops below NCCL's 5 collective
    // functions); for p2p NCCL leaves stale values, and the irecv hint covers LL there.
    constexpr uint32_t kCollOps = 0x1F, kLL = 0x1, kLL128 = 0x2;
    const bool coll = attr->op != uint32_t(NCCL_NET_ATTR_UNDEF) && (attr->op & kCollOps);
    const bool defined = attr->proto != uint32_t(NCCL_NET_ATTR_UNDEF);
    c->attr_flag_polled.store(coll && defined && (attr->proto & (kLL | kLL128)), std::memory_order_relaxed);
    return ncclSuccess;
  });
}

ncclResult_t listen_noctx(int dev, void* handle, void** listen_comm) {
  return listen(nullptr, dev, handle, listen_comm);
}

ncclResult_t connect_noctx(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_t**) {
  return connect(nullptr, dev, handle, send_comm);
}

}  // namespace zipccl::net
