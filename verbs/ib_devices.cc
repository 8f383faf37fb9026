#include "ib_devices.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "gdr.h"
#include "hca_filter.h"
#include "ib_qp.h"
#include "log.h"
#include "ib_params.h"
#include "port_info.h"
#include "sysfs.h"

namespace zipccl::verbs {
namespace {

constexpr size_t kMaxDevs = 32;  // NCCL's MAX_IB_DEVS

int64_t speed_of(const IbvFunctions& fn, ibv_context* ctx, int port, const ibv_port_attr& a) {
  uint64_t speed_100mbps = 0;
  if (fn.query_port_speed && fn.query_port_speed(ctx, uint8_t(port), &speed_100mbps) == 0 && speed_100mbps)
    return int64_t(speed_100mbps) * 100;
  // active_speed_ex (XDR) is not in the rdma-core 44 headers we build with; libraries new enough
  // to report XDR have ibv_query_port_speed, used above.
  return port_speed_mbps(a.active_width, a.active_speed, 0);
}

std::string pci_path_of(const std::string& dev) {
  std::string error;
  const std::string path = ib_device_pci_path("", dev, &error);
  if (path.empty()) {
    ZIP_INFO(NCCL_NET | NCCL_INIT, "%s: no PCI path (%s); NCCL will place it away from the GPUs", dev.c_str(),
             error.c_str());
    return "";
  }
  return merged_pci_path(path, ib_merge_vfs());
}

}  // namespace

std::vector<IbPort> discover_ports(const std::shared_ptr<IbvLibrary>& lib, std::string* why) {
  const IbvFunctions& fn = lib->fn();
  std::vector<IbPort> ports;
  // As NCCL: registered memory must stay with the NIC when the application forks later (data
  // loader workers); without it a kernel lacking RDMA copy-on-fork hands the parent fresh pages.
  if (fn.fork_init() != 0) ZIP_WARN("ibv_fork_init failed: %s", std::strerror(errno));
  int n = 0;
  ibv_device** list = fn.get_device_list(&n);
  if (!list) {
    *why = std::string("ibv_get_device_list failed: ") + std::strerror(errno);
    return ports;
  }
  const char* hca_env = std::getenv("NCCL_IB_HCA");
  const HcaFilter filter = parse_hca_filter(hca_env);
  std::string skipped;  // why each device or port was left out, for *why
  const bool peermem = peermem_loaded("");
  for (int d = 0; d < n && ports.size() < kMaxDevs; ++d) {
    std::string error;
    std::shared_ptr<IbHca> hca = IbHca::open(lib, list[d], &error);
    if (!hca) {
      skipped += "; " + error;
      continue;
    }
    std::shared_ptr<MrCache> mrs;
    int dmabuf = -1;  // probed once per HCA, when it has a usable port
    for (int p = 1; p <= hca->attr().phys_port_cnt; ++p) {
      ibv_port_attr a;
      std::memset(&a, 0, sizeof a);  // older providers leave newer fields untouched
      const std::string where = hca->name() + ":" + std::to_string(p);
      if (fn.query_port(hca->context(), uint8_t(p), &a) != 0) {
        skipped += "; " + where + ": ibv_query_port failed";
        continue;
      }
      if (a.state != IBV_PORT_ACTIVE) {
        skipped += "; " + where + " not active";
        continue;
      }
      if (a.link_layer != IBV_LINK_LAYER_INFINIBAND && a.link_layer != IBV_LINK_LAYER_ETHERNET) {
        skipped += "; " + where + ": link layer " + link_layer_name(a.link_layer);
        continue;
      }
      if (!filter.selects(hca->name(), p)) {
        skipped += "; " + where + " not selected by NCCL_IB_HCA=" + (hca_env ? hca_env : "");
        continue;
      }
      if (!mrs) mrs = std::make_shared<MrCache>(hca, fn, hca->pd(), hca->name(), ib_relaxed_ordering() != 0);
      IbPort ip{hca, mrs, p, a, DeviceInfo{}};
      ip.info.name = hca->name();
      ip.info.port = p;
      ip.info.pci_path = pci_path_of(hca->name());
      ip.info.speed_mbps = int(speed_of(fn, hca->context(), p, a));
      ip.info.guid = hca->attr().sys_image_guid;
      ip.info.max_comms = hca->attr().max_qp / std::max<int64_t>(1, ib_qps_per_conn());  // QPs per connection
      if (dmabuf < 0) dmabuf = dmabuf_supported(fn, hca->pd());
      ip.info.gdr_peermem = peermem;
      ip.info.gdr_dmabuf = dmabuf == 1;
      ip.info.gdr_flush = ib_gdr_flush_disable() == 0;
      ZIP_INFO(NCCL_NET | NCCL_INIT, "[%zu] %s %s %d Mb/s MTU %d guid %#llx pci %s, GPUDirect RDMA: %s",
               ports.size(), where.c_str(), link_layer_name(a.link_layer), ip.info.speed_mbps,
               mtu_bytes(a.active_mtu), (unsigned long long)ip.info.guid,
               ip.info.pci_path.empty() ? "-" : ip.info.pci_path.c_str(),
               peermem ? (dmabuf == 1 ? "peermem, dmabuf" : "peermem") : dmabuf == 1 ? "dmabuf" : "no");
      ports.push_back(std::move(ip));
      hca->start_events();
    }
  }
  fn.free_device_list(list);
  if (ports.empty())
    *why = n == 0 ? std::string("no RDMA device found") : "no usable port" + skipped;
  return ports;
}

bool reopen_port(const std::shared_ptr<IbvLibrary>& lib, IbPort* port, std::string* why) {
  const IbvFunctions& fn = lib->fn();
  int n = 0;
  ibv_device** list = fn.get_device_list(&n);
  if (!list) {
    *why = std::string("ibv_get_device_list failed: ") + std::strerror(errno);
    return false;
  }
  std::shared_ptr<IbHca> hca;
  for (int d = 0; d < n && !hca && why->empty(); ++d)
    if (port->info.name == fn.get_device_name(list[d])) hca = IbHca::open(lib, list[d], why);
  fn.free_device_list(list);
  if (!hca) {
    if (why->empty()) *why = "no such device";
    return false;
  }
  ibv_port_attr a;
  std::memset(&a, 0, sizeof a);
  if (fn.query_port(hca->context(), uint8_t(port->port), &a) != 0 || a.state != IBV_PORT_ACTIVE) {
    *why = "port " + std::to_string(port->port) + " not active";
    return false;
  }
  port->mrs = std::make_shared<MrCache>(hca, fn, hca->pd(), hca->name(), port->mrs->relaxed_ordering());
  port->hca = hca;
  port->attr = a;
  hca->start_events();
  return true;
}

}  // namespace zipccl::verbs
