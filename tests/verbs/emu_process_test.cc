// The emulation between two processes: this test and verbs_emu_peer, which exchange addresses
// over the peer's stdin/stdout like two ranks over NCCL's bootstrap.
#include <arpa/inet.h>

#include <cinttypes>
#include <cstring>
#include <sstream>

#include "emu_test_util.h"

namespace zip::verbs::emu_test {
namespace {

// The peer's connect and this side's, in either order.
void connect_with(Peer* peer, Endpoint* ep) {
  ASSERT_TRUE(peer->started());
  ASSERT_EQ(peer->call("connect " + format_address(ep->address())), "ok 0");
  ASSERT_EQ(ep->connect(peer->address()), 0);
}

std::string hash_line(const char* p, size_t len) { return "hash " + std::to_string(fnv1a(p, len)); }

TEST(EmuProcess, WriteImmReadAndSendBothWays) {
  Peer peer;
  std::string error;
  auto ep = Endpoint::create({}, &error);
  ASSERT_NE(ep, nullptr) << error;
  ASSERT_NO_FATAL_FAILURE(connect_with(&peer, ep.get()));
  const Address& remote = peer.address();

  // RDMA write into the peer, then a write with immediate that its receive reports.
  fill_random(ep->buffer(), 200000, 11);
  ASSERT_EQ(ep->post(IBV_WR_RDMA_WRITE, 1, 0, 100000, false, remote.addr + 4096, remote.rkey), 0);
  ASSERT_EQ(peer.call("recv 1 0"), "ok 0");
  ASSERT_EQ(ep->post(IBV_WR_RDMA_WRITE_WITH_IMM, 2, 100000, 100000, true,
                     remote.addr + 4096 + 100000, remote.rkey, htonl(0x1234)),
            0);
  ibv_wc wc = wait_one(*ep);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 2u);  // the first was unsignaled
  EXPECT_EQ(peer.call("poll 1 5000"), "wcs 1 0:0:129:100000:4660");  // RECV_RDMA_WITH_IMM
  EXPECT_EQ(peer.call("hash 4096 200000"), hash_line(ep->buffer(), 200000));

  // Read back what the peer fills.
  ASSERT_EQ(peer.call("fill 99 300000 50000"), "ok 0");
  ASSERT_EQ(ep->post(IBV_WR_RDMA_READ, 3, 500000, 50000, true, remote.addr + 300000, remote.rkey), 0);
  wc = wait_one(*ep);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(peer.call("hash 300000 50000"), hash_line(ep->buffer() + 500000, 50000));

  // The peer sends to us and writes into our buffer.
  ASSERT_EQ(ep->post_recv(10, 700000, 1000), 0);
  std::ostringstream send;
  send << "post " << IBV_WR_SEND << " 20 300000 1000 0 0 0";
  ASSERT_EQ(peer.call(send.str()), "ok 0");
  EXPECT_EQ(peer.call("poll 1 5000"), "wcs 1 20:0:0:0:0");
  wc = wait_one(*ep);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 1000u);
  EXPECT_EQ(peer.call("hash 300000 1000"), hash_line(ep->buffer() + 700000, 1000));
  std::ostringstream write;
  write << "post " << IBV_WR_RDMA_WRITE << " 21 300000 4000 " << ep->addr(800000) << " "
        << ep->mr()->rkey << " 0";
  ASSERT_EQ(peer.call(write.str()), "ok 0");
  EXPECT_EQ(peer.call("poll 1 5000"), "wcs 1 21:0:1:0:0");
  EXPECT_EQ(peer.call("hash 300000 4000"), hash_line(ep->buffer() + 800000, 4000));
}

}  // namespace
}  // namespace zip::verbs::emu_test
