#include "fake_verbs_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "pair.h"

namespace zipccl::test {

using namespace zipccl::verbs;

bool FakeVerbsPeer::make(int nqps, size_t buffer_bytes) {
  emu_test::EndpointOptions o;
  o.psn = 0;
  o.buffer_bytes = buffer_bytes;
  for (int q = 0; q < nqps; ++q) {
    ep.push_back(emu_test::Endpoint::create(o, &err));
    if (!ep.back()) return false;
  }
  return true;
}

QpInfo FakeVerbsPeer::info(uint64_t nonce) const {
  QpInfo i;
  std::memset(&i, 0, sizeof i);
  i.magic = kInfoMagic;
  i.version = kWireVersion;
  i.nqps = uint16_t(ep.size());
  i.nonce = nonce;
  for (size_t q = 0; q < ep.size(); ++q) i.qpn[q] = ep[q]->qp()->qp_num;
  const auto a0 = ep[0]->address();
  std::memcpy(i.gid, a0.gid.raw, 16);
  i.lid = a0.lid;
  i.link_layer = ep[0]->port().link_layer;
  i.mtu = uint8_t(ep[0]->port().active_mtu);
  i.mailbox_addr = ep[0]->addr(0);  // the plugin writes its clear-to-sends here
  i.mailbox_rkey = ep[0]->mr()->rkey ^ mailbox_key_xor;
  return i;
}

int FakeVerbsPeer::connect(const QpInfo& theirs) {
  for (size_t q = 0; q < ep.size(); ++q) {
    auto to = ep[q]->address();
    to.qpn = theirs.qpn[q];
    to.lid = theirs.lid;
    std::memcpy(to.gid.raw, theirs.gid, 16);
    to.psn = 0;
    if (int e = ep[q]->connect(to)) return e;
  }
  return 0;
}

bool FakeVerbsPeer::cts(uint32_t seq, CtsSlot* out) {
  const char* slot = ep[0]->buffer() + (seq % kFifoSlots) * sizeof(CtsSlot);
  std::atomic_thread_fence(std::memory_order_acquire);
  uint32_t stamp, n, end;
  std::memcpy(&stamp, slot, sizeof stamp);
  std::memcpy(&n, slot + offsetof(CtsSlot, n), sizeof n);
  if (stamp != seq + 1 || n == 0 || n > kMaxRecvs) return false;
  std::memcpy(&end, slot + end_stamp_offset(n), sizeof end);
  if (end != seq + 1) return false;
  std::memcpy(out, slot, sizeof *out);
  return true;
}

std::string accept_fake_sender(client::PluginNet& net, void* lc, const unsigned char* handle, int nqps,
                               FakeVerbsPeer* peer, int* fd, void** rc, size_t buffer_bytes) {
  if (!peer->make(nqps, buffer_bytes)) return "fake peer: " + peer->err;
  const auto [addr, nonce] = handle_info(handle);
  const QpInfo info = peer->info(nonce);
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(*fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return "bootstrap connect failed";
  if (send(*fd, &info, sizeof info, MSG_NOSIGNAL) != ssize_t(sizeof info)) return "bootstrap send failed";
  QpInfo reply;
  size_t got = 0;
  *rc = nullptr;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!*rc && std::chrono::steady_clock::now() < end) {
    if (net.accept(lc, rc) != ncclSuccess) return "accept failed";
    if (got == sizeof reply) continue;
    const ssize_t n = recv(*fd, reinterpret_cast<char*>(&reply) + got, sizeof reply - got, MSG_DONTWAIT);
    if (n > 0 && (got += size_t(n)) == sizeof reply) {
      if (reply.nqps != nqps) return "the plugin answered with " + std::to_string(reply.nqps) + " queue pairs";
      if (const int e = peer->connect(reply)) return "fake peer connect: " + std::string(std::strerror(e));
      const uint32_t ready = kReadyMagic;
      if (send(*fd, &ready, sizeof ready, MSG_NOSIGNAL) != ssize_t(sizeof ready)) return "bootstrap send failed";
    }
  }
  return *rc ? "" : "the handshake did not complete";
}

std::string connect_fake_receiver(client::PluginNet& net, const unsigned char* plugin_handle, FakeVerbsPeer* peer,
                                  QpInfo* theirs, int* lfd, int* cfd, void** sc, size_t buffer_bytes) {
  *lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  *cfd = -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (bind(*lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(*lfd, 4) != 0 ||
      getsockname(*lfd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return "bootstrap listen failed";
  unsigned char h[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(h, plugin_handle, sizeof h);
  std::memset(h + 8, 0, 28);
  std::memcpy(h + 8, &sa, sizeof sa);
  const uint64_t nonce = 0x5eed0f;
  std::memcpy(h + 40, &nonce, sizeof nonce);
  size_t got = 0, ready_got = 0;
  uint32_t ready = 0;
  *sc = nullptr;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!*sc && std::chrono::steady_clock::now() < end) {
    if (net.connect(0, h, sc) != ncclSuccess) return "connect failed";
    if (*cfd < 0) *cfd = accept4(*lfd, nullptr, nullptr, SOCK_NONBLOCK);
    if (*cfd < 0) continue;
    if (got < sizeof *theirs) {
      const ssize_t n = recv(*cfd, reinterpret_cast<char*>(theirs) + got, sizeof *theirs - got, 0);
      if (n <= 0 || (got += size_t(n)) < sizeof *theirs) continue;
      if (theirs->magic != kInfoMagic || theirs->nonce != nonce) return "the plugin's hello is not one";
      if (!peer->make(theirs->nqps, buffer_bytes)) return "fake peer: " + peer->err;
      if (const int e = peer->connect(*theirs)) return "fake peer connect: " + std::string(std::strerror(e));
      const QpInfo mine = peer->info(nonce);
      if (send(*cfd, &mine, sizeof mine, MSG_NOSIGNAL) != ssize_t(sizeof mine)) return "bootstrap send failed";
    }
    if (ready_got < sizeof ready) {
      const ssize_t n = recv(*cfd, reinterpret_cast<char*>(&ready) + ready_got, sizeof ready - ready_got, 0);
      if (n > 0) ready_got += size_t(n);
    }
  }
  return *sc ? "" : "the handshake did not complete";
}

}  // namespace zipccl::test
