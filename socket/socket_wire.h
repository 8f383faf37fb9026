// What the two ends of a socket link send each other. Every socket opens with a Hello carrying
// the listener's nonce; the control socket then carries length-prefixed records (a 4-byte length,
// then a CtsRecord or a HeaderRecord), and a message's bytes follow its HeaderRecord on the data
// sockets, in the order of the headers; or, for a message of at most kMaxInline bytes flagged
// kInline, inside its header's record, right after the HeaderRecord (no helper thread on either
// end: a small message's latency is the control socket's). An inline message flagged kEager went
// before its clear-to-send (Link::post_eager): its seq is the message's index on the connection and
// its sub its isend's tag; the receiver places it once it has posted that receive.
// A receiver whose receives never take compressed bytes need not tell the sender of each: a PushRecord says
// that from placement `first` on no clear-to-send comes until the next CtsRecord, and the sender
// sends every message as it comes, raw and flagged kEager (any size: past kMaxInline its bytes
// follow on the data sockets), as NCCL's own socket transport does with all of them. Flagged
// kPushBounded, only the placements before `until`: further ones wait for the next record, which
// may be another PushRecord of the same `first` that moves `until` on (or lifts the bound), so that
// a sender is never so far ahead that it misses a later receive's clear-to-send.
#pragma once

#include <cstdint>

#include "transport.h"

namespace zipccl::tcp {

constexpr uint32_t kHandleMagic = 0x5A495053u;  // "SPIZ"
constexpr uint32_t kHelloMagic = 0x5A49484Cu;
constexpr uint16_t kVersion = 7;

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t index;   // 0: control socket, 1..n-1: data sockets
  uint16_t nsocks;  // sockets in this connection, control included
  uint16_t reserved;
  uint32_t reserved2;
  uint64_t nonce;
  uint64_t conn_id;  // groups the sockets of one connect()
};
static_assert(sizeof(Hello) == 32, "hello is 32 bytes");

enum RecordType : uint32_t { kCts = 0x5A435453u /* "STCZ" */, kHeader = 0x5A444154u, kPush = 0x5A485350u };
enum RecordFlags : uint32_t {
  kCompressOk = 0x1,  // CtsEntry: the receive takes compressed bytes (staging_bytes of them)
  kCompressed = 0x1,  // HeaderRecord: the bytes that follow are a compressed message
  kRawWhyMask = 0x6,  // HeaderRecord: why a raw message went raw (RawWhy << kRawWhyShift)
  kInline = 0x8,      // HeaderRecord: the message's wire_bytes follow it in the same record
  kEager = 0x10,      // HeaderRecord: sent before its clear-to-send (seq: index, sub: tag); kInline
                      // unless the receiver said kPush
  kPushed = 0x20,     // HeaderRecord, with kEager: pushed, its sender never saw the receive's offer
};
constexpr uint32_t kRawWhyShift = 1;

struct CtsEntry {
  int32_t tag;
  uint32_t flags;
  uint64_t capacity;
  uint64_t target_addr;  // unused over TCP: the receiver places the bytes itself
  uint64_t target_key;
  uint64_t staging_addr;
  uint64_t staging_key;
  uint64_t staging_bytes;
};

struct CtsRecord {
  uint32_t type;  // kCts
  uint32_t seq;
  uint32_t n;
  uint32_t first;  // placement index of e[0]: the placements of every receive posted before
  CtsEntry e[kMaxRecvs];
};

struct PushRecord {
  uint32_t type;   // kPush
  uint32_t first;  // the first placement without a clear-to-send
  uint32_t until;  // with kPushBounded: the first placement the sender may not push yet
  uint32_t flags;  // kPushBounded or 0
};
constexpr uint32_t kPushBounded = 0x1;

struct HeaderRecord {
  uint32_t type;  // kHeader
  uint32_t seq;
  uint32_t sub;
  uint32_t flags;
  uint64_t orig_bytes;
  uint64_t wire_bytes;
};

static_assert(sizeof(CtsEntry) == 56 && sizeof(HeaderRecord) == 32 && sizeof(PushRecord) == 16,
              "records are fixed-size");

constexpr size_t kMaxInline = 64 << 10;
constexpr size_t kMaxRecord = sizeof(HeaderRecord) + kMaxInline;

}  // namespace zipccl::tcp
