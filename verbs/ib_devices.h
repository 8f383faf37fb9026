// Device discovery for the verbs transport, as NCCL's net_ib init does it: every ACTIVE port of
// InfiniBand or Ethernet (RoCE) link layer that NCCL_IB_HCA selects becomes one plugin device.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "ib_hca.h"
#include "ibv_loader.h"
#include "mr_cache.h"
#include "transport.h"

namespace zipccl::verbs {

struct IbPort {
  std::shared_ptr<IbHca> hca;
  std::shared_ptr<MrCache> mrs;  // the registrations of the HCA's protection domain
  int port;
  ibv_port_attr attr;
  DeviceInfo info;  // NCCL's properties: device name, port, PCI path, speed, guid, max QPs
};

// The usable ports in device order, their HCAs' event threads started. Empty, with the reason in
// *why, when there is none.
std::vector<IbPort> discover_ports(const std::shared_ptr<IbvLibrary>& lib, std::string* why);

// After a fatal device event: opens port's HCA again (by name, as a reset device comes back) with
// a fresh protection domain and registration cache, its event thread started. False, with the
// reason in *why, while it is gone or its port is not active; *port is then unchanged.
bool reopen_port(const std::shared_ptr<IbvLibrary>& lib, IbPort* port, std::string* why);

}  // namespace zipccl::verbs
