// A fake verbs peer for tests that break the protocol: queue pairs of its own on the emulated HCA
// (PSN 0, as the plugin's), its mailbox at the start of the first one's buffer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "emu_harness.h"
#include "ib_wire.h"
#include "net_client.h"

namespace zipccl::test {

struct FakeVerbsPeer {
  std::vector<std::unique_ptr<verbs::emu_test::Endpoint>> ep;
  std::string err;
  uint32_t mailbox_key_xor = 0;  // non-zero: info() gives a mailbox key that is not its own

  // nqps queue pairs, each with a buffer of buffer_bytes (the first's starts with the mailbox).
  bool make(int nqps, size_t buffer_bytes = 1 << 20);
  // Its half of the handshake.
  verbs::QpInfo info(uint64_t nonce) const;
  // Its queue pairs to the plugin's: 0, or the failing connect's errno.
  int connect(const verbs::QpInfo& theirs);
  // The clear-to-send the plugin wrote into fifo slot seq % kFifoSlots, once both its stamps say
  // seq: true and *out, or false.
  bool cts(uint32_t seq, verbs::CtsSlot* out);
};

// Connects `peer` (nqps queue pairs, buffers of buffer_bytes) as a sender to the plugin listening
// on lc with handle: the bootstrap socket (*fd, left open: closing it tells the plugin the peer is
// gone) and the plugin's receive comm (*rc). Empty, or what went wrong.
std::string accept_fake_sender(client::PluginNet& net, void* lc, const unsigned char* handle, int nqps,
                               FakeVerbsPeer* peer, int* fd, void** rc, size_t buffer_bytes = 1 << 20);

// Has the plugin connect as a sender to `peer`, a receiver listening on a bootstrap socket of its
// own (*lfd, *cfd: closing them tells the plugin the peer is gone) named in a copy of
// plugin_handle (one of the plugin's listeners: magic and version kept): the plugin's queue-pair
// information (*theirs: its mailbox) and send comm (*sc). Empty, or what went wrong.
std::string connect_fake_receiver(client::PluginNet& net, const unsigned char* plugin_handle, FakeVerbsPeer* peer,
                                  verbs::QpInfo* theirs, int* lfd, int* cfd, void** sc,
                                  size_t buffer_bytes = 1 << 20);

}  // namespace zipccl::test
