#include "socket_transport.h"

#include <limits.h>
#include <stdlib.h>

#include <fstream>

#include "log.h"
#include "socket_params.h"
#include "socket_setup.h"
#include "socket_wire.h"

namespace zipccl::tcp {
namespace {

constexpr int kMaxDevs = 16;

static_assert(sizeof(TcpHandle) <= kTransportHandleBytes, "handle fits");

// 0 when the kernel does not say (virtual interfaces such as lo).
int read_speed_mbps(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  int v = 0;
  return f >> v && v > 0 ? v : 0;
}

std::string read_pci_path(const std::string& ifname) {
  char buf[PATH_MAX];
  const std::string link = "/sys/class/net/" + ifname + "/device";
  if (!realpath(link.c_str(), buf)) return "";
  return buf;
}

class SocketTransport : public Transport {
 public:
  SocketTransport() {
    ifaces_ = find_interfaces(socket_ifname(), socket_family(), kMaxDevs);
    for (const auto& i : ifaces_) {
      DeviceInfo d;
      d.name = i.name;
      d.pci_path = read_pci_path(i.name);
      d.speed_mbps = pace_mbps() > 0 ? int(pace_mbps()) : read_speed_mbps(i.name);
      d.speed_known = d.speed_mbps > 0;
      if (!d.speed_known) d.speed_mbps = 10000;  // what NCCL assumes when the kernel does not say
      d.guid = devs_.size();
      devs_.push_back(d);
      pacers_.push_back(pace_mbps() > 0 ? std::make_shared<Pacer>(double(pace_mbps()) * 1e6 / 8) : nullptr);
    }
  }
  const char* name() const override { return "socket"; }
  std::string settings() const override {
    return std::to_string(socket_threads()) + " socket threads x " + std::to_string(sockets_per_thread()) +
           " sockets, inline up to " + std::to_string(inline_bytes()) + " bytes (" + std::to_string(inline_lone_bytes()) +
           " when alone), " + std::to_string(eager_ahead()) +
           " sent ahead of their clear-to-send" + (push_receives() ? ", pushed into receives that offered nothing" : "");
  }
  int num_devices() const override { return int(devs_.size()); }
  const DeviceInfo& device(int dev) const override { return devs_[dev]; }

  ncclResult_t listen(int dev, void* handle, std::unique_ptr<Listener>* out) override {
    SockAddr a;
    uint64_t nonce;
    const int fd = listen_for_handle(ifaces_[dev].addr, ifaces_[dev].name, kHandleMagic, kVersion, handle, &a, &nonce);
    if (fd < 0) return ncclSystemError;
    const std::string where = ifaces_[dev].name + " " + addr_str(a);
    ZIP_INFO(NCCL_NET, "listening on %s", where.c_str());
    *out = std::make_unique<SocketListener>(fd, nonce, where, pacers_[dev]);
    return ncclSuccess;
  }

  // TCP routes by the handle's address; the local device only chooses whose send cap applies.
  // The traffic class is an RDMA setting; NCCL's socket transport ignores it too.
  ncclResult_t connect(int dev, const void* handle, int, std::unique_ptr<Connector>* out) override {
    SockAddr a;
    uint64_t nonce;
    ZIP_CHECK(parse_handle(handle, kHandleMagic, kVersion, "socket", &a, &nonce));
    *out = std::make_unique<SocketConnector>(a, nonce, pacers_[dev]);
    return ncclSuccess;
  }

 private:
  std::vector<Iface> ifaces_;
  std::vector<DeviceInfo> devs_;
  std::vector<std::shared_ptr<Pacer>> pacers_;  // per device, with NCCL_ZIP_SOCKET_PACE_MBPS
};

}  // namespace

std::unique_ptr<Transport> make_socket_transport() { return std::make_unique<SocketTransport>(); }

}  // namespace zipccl::tcp
