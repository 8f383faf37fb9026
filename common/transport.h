// What the engine needs from a network transport. The socket transport (plugin/) and the ibverbs
// transport (verbs/) implement it: listen/connect/accept, a framed control channel, posted bulk
// transfers polled for completion, memory registration, one sticky error per connection.
// Threading: Listener/Connector/Conn methods are called by one thread at a time per object (the
// engine serialises them); a transport may complete transfers from its own threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "status.h"

namespace zipccl {

// One posted bulk transfer. The engine owns it and keeps it alive until done() and until the
// connection is closed; the transport counts its pieces down from its own threads.
struct Xfer {
  std::atomic<int> pending{0};
  bool done() const { return pending.load(std::memory_order_acquire) == 0; }
};

struct DeviceInfo {
  std::string name;      // e.g. "lo", "eth0", "mlx5_0"
  std::string pci_path;  // real /sys PCI path, empty for virtual interfaces
  int speed_mbps = 0;
  uint64_t guid = 0;     // NCCL groups devices of one NIC by it
  int port = 0;          // IB port number (NCCL's props.port)
  int max_comms = 65536;
  // GPUDirect RDMA: device memory registered by pointer (nvidia-peermem) or by DMA-BUF fd.
  bool gdr_peermem = false;
  bool gdr_dmabuf = false;
  // Receives into such memory must be flushed before the GPU reads them (NCCL's iflush).
  bool gdr_flush = false;
};

// A buffer registered with a transport (RDMA keys). Destroying it releases the registration,
// whatever became of the connection it was made through.
class MemReg {
 public:
  virtual ~MemReg() = default;
};

// Transport-specific part of NCCL's 128-byte connection handle.
constexpr size_t kTransportHandleBytes = 112;

class Conn {
 public:
  virtual ~Conn() = default;
  // Control channel: whole records, in order. send_ctrl never blocks (queues what the network
  // does not take now); recv_ctrl returns one record or *len = 0. Call recv_ctrl only when a
  // record is expected: it may cost a syscall.
  virtual ncclResult_t send_ctrl(const void* rec, size_t len) = 0;
  virtual ncclResult_t recv_ctrl(void* buf, size_t cap, size_t* len) = 0;
  // Sends control bytes queued earlier; cheap when none are. Call on every progress step.
  virtual ncclResult_t progress() = 0;
  // Bulk data, completed in posting order per direction. The buffer must stay valid until
  // x->done(). n may be 0.
  virtual ncclResult_t post_send(const void* buf, size_t n, Xfer* x) = 0;
  virtual ncclResult_t post_recv(void* buf, size_t n, Xfer* x) = 0;
  // Registers [data, data + size) with this connection's device so transfers from or into it need
  // no registration of their own; *out stays null where the transport needs none. A transfer of
  // memory not registered here still works (the transport registers it for that transfer).
  virtual ncclResult_t reg_mem(void* data, size_t size, std::unique_ptr<MemReg>* out) {
    (void)data;
    (void)size;
    out->reset();
    return ncclSuccess;
  }
  // GPUDirect RDMA (devices with gdr_peermem or gdr_dmabuf): registers device memory
  // [data, data + size) for the transport to move itself, through the DMA-BUF dmabuf_fd (data at
  // `offset` in it) when dmabuf_fd >= 0, else by pointer. for_receives: receives into it will be
  // flushed (flush() below), so the means to flush are set up now, outside the data path.
  // Transports whose devices have neither flag are never asked (the default fails).
  virtual ncclResult_t reg_device_mem(void* data, size_t size, int dmabuf_fd, uint64_t offset, bool for_receives,
                                std::unique_ptr<MemReg>* out) {
    (void)data, (void)size, (void)dmabuf_fd, (void)offset, (void)for_receives, (void)out;
    return ncclInternalError;
  }
  // Makes the bytes of completed receives into device memory registered for_receives visible
  // to the GPU's later reads (NCCL's iflush); x completes when they are. data: a byte inside.
  virtual ncclResult_t flush(const void* data, Xfer* x) {
    (void)data, (void)x;
    return ncclInternalError;
  }
  // Sticky error: once a connection fails, every call reports it.
  virtual ncclResult_t error() const = 0;
  virtual std::string error_text() const = 0;
  // Control bytes accepted by send_ctrl but not yet handed to the network.
  virtual size_t ctrl_backlog() const = 0;
  // The peer closed its end (seen by recv_ctrl) and every control record it sent has been read:
  // whoever still waits for a record from it will wait forever.
  virtual bool peer_closed() const = 0;
  virtual std::string peer() const = 0;
};

class Connector {
 public:
  virtual ~Connector() = default;
  // Advances connection setup without blocking; *out stays null until ready.
  virtual ncclResult_t progress(std::unique_ptr<Conn>* out) = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Accepts and authenticates inbound connections without blocking; *out stays null until one
  // full connection (all its sockets/queues) has arrived. Strangers are rejected and logged.
  virtual ncclResult_t accept(std::unique_ptr<Conn>* out) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Per-connection settings for the init log line ("2 socket threads x 2 sockets").
  virtual std::string settings() const = 0;
  virtual int num_devices() const = 0;
  virtual const DeviceInfo& device(int dev) const = 0;
  // Fills handle[0, kTransportHandleBytes) for the peer's connect().
  virtual ncclResult_t listen(int dev, void* handle, std::unique_ptr<Listener>* out) = 0;
  // traffic_class: NCCL's per-communicator setting (v10 connect config, v11 init config), -1 for
  // the transport's default.
  virtual ncclResult_t connect(int dev, const void* handle, int traffic_class, std::unique_ptr<Connector>* out) = 0;
};

}  // namespace zipccl
