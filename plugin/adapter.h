// Helpers shared by the per-version adapters: filling NCCL's property structs and narrowing v8's
// int sizes. Each adapter file stays a thin table of conversions.
#pragma once

#include "net.h"

namespace zipccl::net {

#define ZIP_EXPORT __attribute__((visibility("default")))

// Members present since v8.
template <class P>
ncclResult_t fill_props_v8(int dev, P* p) {
  Props q;
  ncclResult_t r = properties(dev, &q);
  if (r != ncclSuccess) return r;
  *p = P{};
  p->name = q.name;
  p->pciPath = q.pci_path;
  p->guid = q.guid;
  p->ptrSupport = q.ptr_support;
  p->regIsGlobal = 0;
  p->speed = q.speed_mbps;
  p->port = q.port;
  p->latency = 0;
  p->maxComms = q.max_comms;
  p->maxRecvs = q.max_recvs;
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = 0;
  return ncclSuccess;
}

// Members added in v9 (forceFlush, virtual devices, size limits).
template <class P>
ncclResult_t fill_props_v9(int dev, P* p) {
  ncclResult_t r = fill_props_v8(dev, p);
  if (r != ncclSuccess) return r;
  Props q;
  properties(dev, &q);
  p->forceFlush = 0;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = q.max_p2p_bytes;
  p->maxCollBytes = q.max_coll_bytes;
  return ncclSuccess;
}

}  // namespace zipccl::net
