// Devices, contexts, queries and async events.
#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "api.h"
#include "identity.h"
#include "state.h"

using namespace zipccl::verbs::emu;

namespace {

// How long close_device waits for threads blocked in get_async_event to leave after waking
// them (they only need the lock).
constexpr auto kReaderExitWait = std::chrono::seconds(2);

void report(const std::string& what) { std::fprintf(stderr, "zipccl-verbs-emu: %s\n", what.c_str()); }

// The routing id of (device, port), bound on first need and kept for the process's lifetime so a
// port keeps its LID and GIDs across device lists. A DOWN port has none.
bool ensure_port(Emu& e, const DeviceSpec& spec, int port_num, Port** out) {
  std::unique_ptr<Port>& port = e.ports[{spec.name, port_num}];
  if (!port) port = std::make_unique<Port>();
  if (!spec.down && port->listen_fd < 0) {
    std::string error;
    port->listen_fd = bind_lid_socket(&port->lid, &error);
    if (port->listen_fd < 0) {
      report("cannot give " + spec.name + " port " + std::to_string(port_num) + " a LID: " + error);
      return false;
    }
  }
  *out = port.get();
  return true;
}

void unref_device(Emu& e, Device* d) {
  if (--d->refs == 0) e.devices.erase(&d->verbs);
}

uint64_t node_guid(const Device* d) { return node_id() << 16 | (0xC000u + d->index); }

bool port_up(const Device* d, uint8_t port) { return !d->spec.down && d->ports[port - 1]->lid; }

}  // namespace

ZIP_EMU_EXPORT int ibv_fork_init() { return 0; }

ZIP_EMU_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  std::vector<DeviceSpec> specs;
  std::string error;
  if (!parse_device_specs(std::getenv("NCCL_ZIP_EMU_DEVICES"), &specs, &error)) {
    report(error);
    return fail_null<ibv_device*>(EINVAL);
  }
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  std::vector<std::unique_ptr<Device>> made;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto d = std::make_unique<Device>();
    d->spec = specs[i];
    d->index = static_cast<int>(i);
    for (int p = 1; p <= specs[i].ports; ++p) {
      Port* port;
      if (!ensure_port(e, specs[i], p, &port)) return fail_null<ibv_device*>(ENOMEM);
      d->ports.push_back(port);
    }
    ibv_device& v = d->verbs;
    v.node_type = IBV_NODE_CA;
    v.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(v.name, sizeof(v.name), "%s", specs[i].name.c_str());
    std::snprintf(v.dev_name, sizeof(v.dev_name), "uverbs%zu", i);
    std::snprintf(v.dev_path, sizeof(v.dev_path), "/sys/class/infiniband_verbs/uverbs%zu", i);
    std::snprintf(v.ibdev_path, sizeof(v.ibdev_path), "/sys/class/infiniband/%s", v.name);
    made.push_back(std::move(d));
  }
  auto** list = static_cast<ibv_device**>(std::calloc(made.size() + 1, sizeof(ibv_device*)));
  if (!list) return fail_null<ibv_device*>(ENOMEM);
  for (size_t i = 0; i < made.size(); ++i) {
    made[i]->refs = 1;
    list[i] = &made[i]->verbs;
    e.devices.emplace(list[i], std::move(made[i]));
  }
  if (num_devices) *num_devices = static_cast<int>(specs.size());
  wake(e);  // new listening sockets to poll
  return list;
}

ZIP_EMU_EXPORT void ibv_free_device_list(ibv_device** list) {
  if (!list) return;
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  for (ibv_device** p = list; *p; ++p) {
    auto it = e.devices.find(*p);
    if (it != e.devices.end()) unref_device(e, it->second.get());
  }
  std::free(list);
}

ZIP_EMU_EXPORT const char* ibv_get_device_name(ibv_device* device) { return device->name; }

ZIP_EMU_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  auto it = e.devices.find(device);
  return it == e.devices.end() ? 0 : htobe64(node_guid(it->second.get()));
}

ZIP_EMU_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  FaultPlan faults;
  GdrSupport gdr;
  std::string error;
  if (!parse_fault_plan(std::getenv("NCCL_ZIP_EMU_FAULT"), &faults, &error) ||
      !parse_gdr_support(std::getenv("NCCL_ZIP_EMU_GDR"), &gdr, &error)) {
    report(error);
    return fail_null<ibv_context>(EINVAL);
  }
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  auto dev = e.devices.find(device);
  if (dev == e.devices.end()) return fail_null<ibv_context>(ENODEV);
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return nullptr;
  auto c = std::make_unique<Context>();
  c->device = dev->second.get();
  c->faults = faults;
  c->gdr = gdr;
  c->async_signal_fd = fds[1];
  ibv_context& v = c->verbs;
  v.device = device;
  v.cmd_fd = -1;
  v.async_fd = fds[0];
  v.num_comp_vectors = 1;
  v.abi_compat = nullptr;  // not extended: verbs.h's *_ex calls report EOPNOTSUPP
  v.ops.post_send = post_send;
  v.ops.post_recv = post_recv;
  v.ops.poll_cq = poll_cq;
  v.ops.req_notify_cq = req_notify_cq;
  pthread_mutex_init(&v.mutex, nullptr);
  ++c->device->refs;
  return &e.contexts.emplace(&v, std::move(c)).first->second->verbs;
}

ZIP_EMU_EXPORT int ibv_close_device(ibv_context* context) {
  Emu& e = emu();
  std::unique_lock<std::mutex> lock(e.mu);
  Context* c = find(e, context);
  if (!c) return EINVAL;
  c->closing = true;
  char byte = 1;
  [[maybe_unused]] ssize_t n = send(c->async_signal_fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  e.cv.wait_for(lock, kReaderExitWait, [c] { return c->async_readers == 0; });

  // Objects left open go with the context, as the kernel cleans up after a process; the caller
  // leaked them, which a test wants to hear about.
  size_t leaked = 0;
  auto sweep = [&](auto& map, auto drop) {
    std::vector<decltype(map.begin()->second.get())> mine;
    for (auto& [ptr, obj] : map) {
      if (obj->ctx == c) mine.push_back(obj.get());
    }
    for (auto* obj : mine) drop(e, obj);
    leaked += mine.size();
  };
  sweep(e.qps, drop_qp);
  std::vector<Mr*> mrs;
  for (auto& [ptr, mr] : e.mrs) {
    if (mr->pd->ctx == c) mrs.push_back(mr.get());
  }
  for (Mr* mr : mrs) drop_mr(e, mr);
  leaked += mrs.size();
  sweep(e.cqs, drop_cq);
  sweep(e.pds, drop_pd);
  std::vector<Channel*> channels;
  for (auto& [ptr, ch] : e.channels) {
    if (ch->verbs.context == context) channels.push_back(ch.get());
  }
  for (Channel* ch : channels) drop_channel(e, ch);
  leaked += channels.size();
  if (leaked) {
    report("ibv_close_device(" + c->device->spec.name + "): " + std::to_string(leaked) +
           " objects were still open (QPs, MRs, CQs, PDs, channels); destroyed with it");
  }
  close(c->verbs.async_fd);
  close(c->async_signal_fd);
  pthread_mutex_destroy(&c->verbs.mutex);
  unref_device(e, c->device);
  e.contexts.erase(context);
  return 0;
}

ZIP_EMU_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Context* c = find(e, context);
  if (!c) return EINVAL;
  if (c->lost) return EIO;
  std::memset(attr, 0, sizeof(*attr));
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "zipccl-verbs-emu");
  attr->node_guid = htobe64(node_guid(c->device));
  attr->sys_image_guid = htobe64(node_id() << 16);
  attr->max_mr_size = kMaxMsg * 512;
  attr->page_size_cap = 0xFFFFF000;
  attr->max_qp = kMaxQp;
  attr->max_qp_wr = kMaxQpWr;
  attr->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
  attr->max_sge = kMaxSge;
  attr->max_sge_rd = kMaxSge;
  attr->max_cq = kMaxQp;
  attr->max_cqe = kMaxCqe;
  attr->max_mr = 1 << 24;
  attr->max_pd = 1 << 24;
  attr->max_qp_rd_atom = kMaxRdAtomic;
  attr->max_res_rd_atom = kMaxRdAtomic * kMaxQp;
  attr->max_qp_init_rd_atom = kMaxRdAtomic;
  attr->atomic_cap = IBV_ATOMIC_NONE;
  attr->max_pkeys = 1;
  attr->local_ca_ack_delay = 16;
  attr->phys_port_cnt = static_cast<uint8_t>(c->device->spec.ports);
  return 0;
}

// verbs.h declares the exported ibv_query_port with an opaque compat struct and hides it behind
// a macro that passes a whole struct ibv_port_attr (zeroed), as the loader's users do. Defined
// here under another C++ name with the real type, so that a call through the loader's pointer
// has the type of the function it reaches (UBSan checks it).
extern "C" int emu_query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr)
    __asm__("ibv_query_port") __attribute__((visibility("default")));
extern "C" int emu_query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Context* c = find(e, context);
  if (!c) return EINVAL;
  if (c->lost) return EIO;
  const Device* d = c->device;
  if (port_num < 1 || port_num > d->spec.ports) return EINVAL;
  bool up = port_up(d, port_num);
  std::memset(attr, 0, sizeof(*attr));
  attr->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_4096;
  attr->gid_tbl_len = kGidTableLen;
  attr->max_msg_sz = static_cast<uint32_t>(kMaxMsg);
  attr->pkey_tbl_len = 1;
  attr->max_vl_num = 4;
  attr->active_width = 2;    // 4x (IBV_WIDTH: 1 1x, 2 4x, 4 8x, 8 12x, 16 2x)
  attr->active_speed = 64;   // HDR, 50 Gb/s a lane: 200 Gb/s in all
  attr->phys_state = up ? 5 : 3;  // LinkUp / Disabled
  if (d->spec.roce) {
    attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  } else {
    attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
    attr->lid = up ? d->ports[port_num - 1]->lid : 0;
    attr->sm_lid = up ? 1 : 0;
    attr->port_cap_flags = IBV_PORT_CM_SUP;
  }
  return 0;
}

// rdma-core's conventions: -1 for a bad port or index, 0 and zeros for an empty entry.
ZIP_EMU_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Context* c = find(e, context);
  if (!c || c->lost) return -1;
  const Device* d = c->device;
  if (port_num < 1 || port_num > d->spec.ports || index < 0 || index >= kGidTableLen) return -1;
  std::memset(gid, 0, sizeof(*gid));
  if (!port_up(d, port_num)) return 0;
  uint16_t lid = d->ports[port_num - 1]->lid;
  if (!d->spec.roce) {
    if (index == 0) *gid = link_local_gid(lid);
  } else {
    // mlx5's usual layout: link-local RoCE v1, v2, then IPv4-mapped v1, v2.
    *gid = index < 2 ? link_local_gid(lid) : ipv4_mapped_gid(lid);
  }
  return 0;
}

ZIP_EMU_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  Emu& e = emu();
  std::unique_lock<std::mutex> lock(e.mu);
  Context* c = find(e, context);
  if (!c) {
    errno = EINVAL;
    return -1;
  }
  ++c->async_readers;
  int rc = -1;
  for (;;) {
    if (c->closing) {
      errno = EIO;
      break;
    }
    if (!c->events.empty()) {
      *event = c->events.front();
      c->events.pop_front();
      char byte;
      [[maybe_unused]] ssize_t n = recv(c->verbs.async_fd, &byte, 1, MSG_DONTWAIT);
      rc = 0;
      break;
    }
    int fd = c->verbs.async_fd;
    if (fcntl(fd, F_GETFL) & O_NONBLOCK) {
      errno = EAGAIN;
      break;
    }
    // Blocks like rdma-core's read() of the async fd; an event or close_device wakes it.
    lock.unlock();
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, -1);
    lock.lock();
  }
  --c->async_readers;
  e.cv.notify_all();
  return rc;
}

ZIP_EMU_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
      if (Cq* cq = find(e, event->element.cq)) ++cq->verbs.async_events_completed;
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
      if (Qp* qp = find(e, event->element.qp)) ++qp->verbs.events_completed;
      break;
    default:
      break;
  }
}
