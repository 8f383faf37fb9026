// What the two ends of a verbs connection exchange: the handle NCCL carries from listener to
// connector, the queue-pair information swapped over the TCP bootstrap socket, and the mailbox
// each end exposes for the other's RDMA writes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ib_params.h"
#include "transport.h"

namespace zipccl::verbs {

constexpr uint32_t kHandleMagic = 0x5A494249u;  // "IBIZ"
constexpr uint32_t kInfoMagic = 0x5A49514Fu;
constexpr uint32_t kReadyMagic = 0x5A495244u;
constexpr uint16_t kWireVersion = 1;

// The handle is a TcpHandle (plugin/tcp_handshake.h) with kHandleMagic: the bootstrap
// listener's address and the nonce a connector must present.

// One end's half of the exchange: the connector sends its own first (the listener's hello), the
// listener answers with its own, the connector confirms with kReadyMagic once its QPs are ready
// to send. nqps is the connector's NCCL_IB_QPS_PER_CONNECTION, which the listener adopts.
struct QpInfo {
  uint32_t magic;  // kInfoMagic
  uint16_t version;
  uint16_t nqps;
  uint64_t nonce;  // the handle's (the listener echoes it)
  uint32_t qpn[kMaxQpsPerConn];
  uint8_t gid[16];
  uint16_t lid;
  uint8_t link_layer;
  uint8_t mtu;  // the port's active ibv_mtu
  uint32_t gid_index;
  uint64_t mailbox_addr;  // where the other end RDMA-writes its advertisements and credits
  uint32_t mailbox_rkey;
  // The connector's traffic class + 1 (NCCL's per-communicator trafficClass), which the listener
  // adopts; 0 leaves both ends at NCCL_IB_TC.
  uint32_t traffic_class;
};

constexpr uint32_t kFifoSlots = 128;  // receives advertised ahead of their sends

// A receive buffer advertised to the sender: posted by RDMA write into the sender's mailbox
// fifo. stamp and stamp_end (both the receive's sequence number + 1) are written with the entry
// and read around it, so an entry is used only once all of it has landed.
struct Advert {
  uint64_t stamp;
  uint64_t addr;
  uint32_t len;
  uint32_t rkey;
  uint64_t stamp_end;
};
static_assert(sizeof(Advert) == 32, "one advertisement is 32 bytes");

struct Mailbox {
  Advert fifo[kFifoSlots];
  uint64_t ctrl_consumed;  // control records of ours the other end has taken (its credits to us)
};

}  // namespace zipccl::verbs
