// A socket link whose peer the test plays, reading and writing the wire format's raw bytes over
// socket pairs: the link owns its ends, the test keeps the others.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "socket_link.h"
#include "socket_wire.h"

namespace zipccl::tcp {

struct Pair {
  int ctrl[2], data[2];
  Pair() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ctrl), 0);
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, data), 0);
  }
  ~Pair() { close_peer(); }
  // The peer's ends closed, as when its process dies.
  void close_peer() {
    for (int* fd : {&ctrl[1], &data[1]})
      if (*fd >= 0) close(std::exchange(*fd, -1));
  }
};

// Posts receive seq 0: raw bytes into *target.
inline ncclResult_t post_receive(SocketLink& link, std::vector<char>* target) {
  ClearToSend cts{};
  cts.n = 1;
  cts.p[0].capacity = target->size();
  cts.p[0].target = reinterpret_cast<uintptr_t>(target->data());
  return link.post_cts(cts);
}

inline std::vector<char> pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char(i * 131 + size_t(seed));
  return v;
}

inline void write_all(int fd, const std::vector<char>& b) {
  size_t off = 0;
  while (off < b.size()) {
    const ssize_t w = write(fd, b.data() + off, b.size() - off);
    ASSERT_GT(w, 0);
    off += size_t(w);
  }
}

// n bytes, or fewer if the link closes its end first.
inline std::vector<char> read_exactly(int fd, size_t n) {
  std::vector<char> b(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, b.data() + got, n - got);
    if (r <= 0) break;
    got += size_t(r);
  }
  b.resize(got);
  return b;
}

// A control record as the peer writes it: the length field `len`, the header, then `payload`.
inline std::vector<char> header_record(const HeaderRecord& h, const std::vector<char>& payload, uint32_t len) {
  std::vector<char> rec(4 + sizeof h + payload.size());
  std::memcpy(rec.data(), &len, 4);
  std::memcpy(rec.data() + 4, &h, sizeof h);
  std::copy(payload.begin(), payload.end(), rec.begin() + 4 + long(sizeof h));
  return rec;
}

// Clear-to-send seq `seq` (after as many of one placement) for one raw receive of `capacity` bytes,
// as the peer writes it.
inline std::vector<char> cts_record(uint32_t seq, uint64_t capacity) {
  CtsRecord c{};
  c.type = kCts;
  c.seq = seq;
  c.n = 1;
  c.first = seq;  // one placement each
  c.e[0].capacity = capacity;
  const uint32_t len = sizeof c;
  std::vector<char> rec(4 + sizeof c);
  std::memcpy(rec.data(), &len, 4);
  std::memcpy(rec.data() + 4, &c, sizeof c);
  return rec;
}

// A sending link's next record as poll_cts() gives it, waiting up to 2 s; false if none came.
inline bool next_cts(SocketLink& link, ClearToSend* cts) {
  using Clock = std::chrono::steady_clock;
  bool got = false;
  for (const auto end = Clock::now() + std::chrono::seconds(2); !got && Clock::now() < end;)
    if (link.poll_cts(cts, &got) != ncclSuccess) {
      ADD_FAILURE() << link.error_text();
      return false;
    }
  return got;
}

}  // namespace zipccl::tcp
