#include "ib_transport.h"

#include <unistd.h>

#include <mutex>
#include <vector>

#include "ib_handshake.h"
#include "ib_devices.h"
#include "ib_wire.h"
#include "log.h"
#include "ib_params.h"
#include "sockets.h"
#include "tcp_bootstrap.h"

namespace zipccl::verbs {
namespace {

class IbTransport : public Transport {
 public:
  IbTransport(std::shared_ptr<IbvLibrary> lib, std::vector<IbPort> ports, Iface bootstrap)
      : lib_(std::move(lib)), ports_(std::move(ports)), bootstrap_(std::move(bootstrap)) {}

  const char* name() const override { return "ib"; }
  std::string settings() const override {
    const bool ro = !ports_.empty() && ports_[0].mrs->relaxed_ordering();
    return std::to_string(ib_qps_per_conn()) + " QP(s) per connection, timeout " + std::to_string(ib_timeout()) +
           ", retry count " + std::to_string(ib_retry_cnt()) + (ro ? ", relaxed ordering" : "") + ", bootstrap over " +
           bootstrap_.name;
  }
  int num_devices() const override { return int(ports_.size()); }
  const DeviceInfo& device(int dev) const override { return ports_[size_t(dev)].info; }

  ncclResult_t listen(int dev, void* handle, std::unique_ptr<Listener>* out) override {
    SockAddr a;
    uint64_t nonce;
    const int fd = listen_for_handle(bootstrap_.addr, bootstrap_.name, kHandleMagic, kWireVersion, handle, &a, &nonce);
    if (fd < 0) return ncclSystemError;
    IbPort port;
    if (ncclResult_t e = live_port(dev, &port)) {
      close(fd);
      return e;
    }
    const std::string where = port.info.name + ":" + std::to_string(port.port) + " via " + addr_str(a);
    ZIP_INFO(NCCL_NET, "listening on %s", where.c_str());
    *out = std::make_unique<IbListener>(port, fd, nonce, where);
    return ncclSuccess;
  }

  ncclResult_t connect(int dev, const void* handle, int traffic_class, std::unique_ptr<Connector>* out) override {
    SockAddr a;
    uint64_t nonce;
    ZIP_CHECK(parse_handle(handle, kHandleMagic, kWireVersion, "verbs", &a, &nonce));
    IbPort port;
    ZIP_CHECK(live_port(dev, &port));
    std::unique_ptr<IbLink> conn;
    ZIP_CHECK(IbLink::create(port, ib_qps_per_conn(), traffic_class, &conn));
    *out = std::make_unique<IbLinkector>(std::move(conn), a, nonce);
    return ncclSuccess;
  }

 private:
  // Device dev's port for a new connection. A fatal device event (a reset) killed its HCA for
  // good: it is opened again, so that new communicators work once the device is back; the
  // connections it failed stay failed.
  ncclResult_t live_port(int dev, IbPort* out) {
    std::lock_guard<std::mutex> g(mu_);
    IbPort& p = ports_[size_t(dev)];
    if (p.hca->fatal()) {
      std::string why;
      if (!reopen_port(lib_, &p, &why)) {
        ZIP_WARN("%s: lost to a fatal event and not back (%s): no new connection on it", p.info.name.c_str(),
                 why.c_str());
        return ncclSystemError;
      }
      ZIP_INFO(NCCL_NET | NCCL_INIT, "%s: opened again after a fatal device event", p.info.name.c_str());
    }
    *out = p;
    return ncclSuccess;
  }

  std::shared_ptr<IbvLibrary> lib_;
  std::mutex mu_;  // NCCL's threads of several communicators connect at once
  std::vector<IbPort> ports_;
  Iface bootstrap_;
};

}  // namespace

std::unique_ptr<Transport> make_ib_transport(std::string* why) {
  std::string error;
  std::shared_ptr<IbvLibrary> lib = load_ibverbs(ibverbs_library_path(), &error);
  if (!lib) {
    *why = error;
    return nullptr;
  }
  std::vector<IbPort> ports = discover_ports(lib, why);
  if (ports.empty()) return nullptr;
  // NCCL's IB transport bootstraps over the same interface its socket code would pick.
  std::vector<Iface> ifs = find_interfaces(socket_ifname(), socket_family(), 1);
  if (ifs.empty()) {
    *why = "no network interface for the bootstrap connection (NCCL_SOCKET_IFNAME=" + socket_ifname() + ")";
    return nullptr;
  }
  return std::make_unique<IbTransport>(std::move(lib), std::move(ports), ifs[0]);
}

}  // namespace zipccl::verbs
