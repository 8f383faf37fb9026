// What the two ends of a verbs link exchange: the handle NCCL carries from listener to connector,
// the queue-pair information swapped over the TCP bootstrap socket, and the clear-to-send slots
// the receiver RDMA-writes into the sender's mailbox.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ib_params.h"
#include "transport.h"

namespace zipccl::verbs {

constexpr uint32_t kHandleMagic = 0x5A494249u;  // "IBIZ"
constexpr uint32_t kInfoMagic = 0x5A49514Fu;
constexpr uint32_t kReadyMagic = 0x5A495244u;
constexpr uint16_t kWireVersion = 3;

// The handle is a TcpHandle (common/tcp_bootstrap.h) with kHandleMagic: the bootstrap
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
  uint64_t mailbox_addr;  // where the other end RDMA-writes its clear-to-sends
  uint32_t mailbox_rkey;
  // The connector's traffic class + 1 (NCCL's per-communicator trafficClass), which the listener
  // adopts; 0 leaves both ends at NCCL_IB_TC.
  uint32_t traffic_class;
};

// Clear-to-sends in flight per link: the engine has at most kMaxRequests receives posted, and a
// receive completes only after the sender has read its slot.
constexpr uint32_t kFifoSlots = kMaxRequests;

// One placement as the sender reads it.
struct CtsEntry {
  int32_t tag;
  uint32_t target_rkey;
  uint64_t target_addr;
  uint64_t capacity;
  uint64_t staging_addr;
  uint64_t staging_bytes;  // 0: raw only
  uint32_t staging_rkey;
  uint32_t reserved;
};
static_assert(sizeof(CtsEntry) == 48, "a placement is 48 bytes");

// A clear-to-send, written by one RDMA write of its first cts_bytes(n) bytes: stamp, n, the n
// placements and, right after them, the end stamp. Both stamps are the sequence number + 1; the
// sender reads the first, the fields, then the end stamp, and takes the slot only when both match.
// One receive's clear-to-send is 60 bytes: it goes inline.
struct CtsSlot {
  uint32_t stamp;
  uint32_t n;
  CtsEntry e[kMaxRecvs];
  uint32_t end_stamp_room;  // where the end stamp lands when n == kMaxRecvs
};
constexpr size_t end_stamp_offset(uint32_t n) { return offsetof(CtsSlot, e) + n * sizeof(CtsEntry); }
constexpr size_t cts_bytes(uint32_t n) { return end_stamp_offset(n) + sizeof(uint32_t); }
static_assert(cts_bytes(1) == 60, "one receive's clear-to-send fits 64 inline bytes");

// What each end exposes to the other's RDMA writes.
struct Mailbox {
  CtsSlot fifo[kFifoSlots];
};

// A message's last write on each queue pair it uses carries this immediate: whether the bytes are
// compressed and how many landed (31 bits), or for a raw message why it went raw (RawWhy, 2 bits)
// and how many landed (29 bits). Which placement it fills follows from the order: messages go out
// in (seq, sub) order.
constexpr uint32_t kImmCompressed = 0x80000000u;
constexpr uint32_t kImmRawWhyShift = 29;
constexpr uint32_t kImmRawBytes = (1u << kImmRawWhyShift) - 1;
constexpr uint64_t kMaxWireBytes = kImmRawBytes;
static_assert(kMaxMessageBytes <= kMaxWireBytes, "NCCL's largest message fits an immediate");

}  // namespace zipccl::verbs
