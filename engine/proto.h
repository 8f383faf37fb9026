// The engine's wire protocol, carried over any transport's control channel (ordered, reliable,
// message-framed). Receiver-driven: every irecv sends one Cts record describing, per grouped
// receive, where the bytes may go and whether they may arrive compressed; the sender answers each
// matched isend with one DataHeader, then the payload on the data path. Payloads go out in the
// order of their DataHeaders, so the receiver places them by header order alone.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zipccl::proto {

constexpr uint32_t kMaxRecvs = 8;  // grouped receives per irecv (props.maxRecvs)
constexpr uint32_t kMaxRequests = 32;

enum RecordType : uint32_t { kCts = 0x5A435453u /* "STCZ" */, kData = 0x5A444154u };

enum CtsFlags : uint32_t {
  // The receive buffer is read by NCCL's kernel only after test() completes (Simple protocol):
  // compressed bytes may be sent; the receiver decodes them into the target itself.
  kCompressOk = 0x1,
};

// Addresses and keys let an RDMA transport write straight into the receiver's memory; the socket
// transport ignores them and the receiver places the bytes itself.
struct CtsEntry {
  int32_t tag;
  uint32_t flags;
  uint64_t capacity;       // bytes the target can take (uncompressed)
  uint64_t target_addr;
  uint64_t target_key;
  uint64_t staging_addr;   // where compressed bytes land; valid with kCompressOk
  uint64_t staging_key;
  uint64_t staging_bytes;
};

struct Cts {
  uint32_t type;  // kCts
  uint32_t seq;   // irecv sequence number on this connection
  uint32_t n;     // entries used
  uint32_t reserved;
  CtsEntry e[kMaxRecvs];
};

enum DataFlags : uint32_t { kCompressed = 0x1 };

struct DataHeader {
  uint32_t type;        // kData
  uint32_t seq;         // the Cts this send matched
  uint32_t sub;         // the entry in that Cts
  uint32_t flags;       // DataFlags
  uint64_t orig_bytes;  // size NCCL passed to isend
  uint64_t wire_bytes;  // payload bytes that follow on the data path
};

static_assert(sizeof(CtsEntry) == 56 && sizeof(DataHeader) == 32, "wire records are fixed-size");

}  // namespace zipccl::proto
