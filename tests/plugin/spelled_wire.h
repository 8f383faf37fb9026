// The socket transport's wire format (socket/socket_wire.h) spelled out by hand for the tests
// that speak it as a fake peer: they do not include the transport's own header, so that a change
// to the format fails them until this file is changed with it, on purpose.
#pragma once

#include <cstdint>

namespace zipccl::test::wire {

constexpr uint32_t kHelloMagic = 0x5A49484Cu, kHandleMagic = 0x5A495053u, kCts = 0x5A435453u,
                   kHeader = 0x5A444154u, kPush = 0x5A485350u;
constexpr uint16_t kVersion = 7;

#pragma pack(push, 1)
// How both transports' handles begin (common/tcp_bootstrap.h): the listener's address (a
// sockaddr_in or sockaddr_in6) at byte 8, its nonce at byte 40.
struct HandleHead {
  uint32_t magic;
  uint16_t version, reserved;
  uint8_t addr[28];
  uint32_t pad;
  uint64_t nonce;
};
struct Hello {
  uint32_t magic;
  uint16_t version, index, nsocks, reserved;
  uint32_t reserved2;
  uint64_t nonce, conn_id;
};
struct HeaderRecord {
  uint32_t type, seq, sub, flags;
  uint64_t orig_bytes, wire_bytes;
};
// A control record on the wire: its length, then the record.
struct FramedHeader {
  uint32_t len;
  HeaderRecord h;
};
struct CtsEntry {
  int32_t tag;
  uint32_t flags;
  uint64_t capacity, target_addr, target_key, staging_addr, staging_key, staging_bytes;
};
struct CtsRecord {
  uint32_t type, seq, n, first;
  CtsEntry e[8];
};
#pragma pack(pop)
static_assert(sizeof(HandleHead) == 48 && sizeof(Hello) == 32 && sizeof(FramedHeader) == 36, "the wire's sizes");

}  // namespace zipccl::test::wire
