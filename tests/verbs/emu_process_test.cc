// The emulation between two processes: this test and verbs_emu_peer, which exchange addresses
// over the peer's stdin/stdout like two ranks over NCCL's bootstrap.
#include <arpa/inet.h>

#include <cinttypes>
#include <cstring>
#include <sstream>

#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
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

TEST(EmuProcess, PeersHaveTheirOwnAddresses) {
  Peer peer;
  ASSERT_TRUE(peer.started());
  std::string error;
  auto ep = Endpoint::create({}, &error);
  ASSERT_NE(ep, nullptr) << error;
  EXPECT_NE(peer.address().lid, ep->address().lid);
  EXPECT_NE(std::memcmp(peer.address().gid.raw, ep->address().gid.raw, 16), 0);
}

TEST(EmuProcess, KeyViolationLeavesPeerMemoryUntouched) {
  Peer peer;
  std::string error;
  auto ep = Endpoint::create({}, &error);
  ASSERT_NE(ep, nullptr) << error;
  ASSERT_NO_FATAL_FAILURE(connect_with(&peer, ep.get()));
  ASSERT_EQ(peer.call("fill 5 0 1048576"), "ok 0");
  std::string before = peer.call("hash 0 1048576");
  const Address& remote = peer.address();
  fill_random(ep->buffer(), 4096, 12);
  ASSERT_EQ(ep->post(IBV_WR_RDMA_WRITE, 1, 0, 4096, true, remote.addr, remote.rkey + 1), 0);
  ASSERT_EQ(ep->post(IBV_WR_RDMA_WRITE, 2, 0, 4096, true, remote.addr + (1 << 20) - 100,
                     remote.rkey),
            0);
  std::vector<ibv_wc> wcs = ep->poll(2, 5000ms);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(peer.call("hash 0 1048576"), before);
}

TEST(EmuProcess, PeerKilledMidTransferFailsInBoundedTime) {
  Peer peer;
  std::string error;
  EndpointOptions o;
  o.buffer_bytes = 4 << 20;
  o.timeout = 14;  // 67 ms per attempt
  o.retry_cnt = 7;
  auto ep = Endpoint::create(o, &error);
  ASSERT_NE(ep, nullptr) << error;
  ASSERT_NO_FATAL_FAILURE(connect_with(&peer, ep.get()));
  const Address& remote = peer.address();
  // 1 MiB writes into the peer's 1 MiB buffer, more than can have landed when it dies.
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(ep->post(IBV_WR_RDMA_WRITE, i, 0, 1 << 20, true, remote.addr, remote.rkey), 0);
  }
  std::vector<ibv_wc> done = ep->poll(1, 5000ms);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  peer.kill_now();
  auto killed = std::chrono::steady_clock::now();
  std::vector<ibv_wc> rest = ep->poll(63, 10000ms);
  auto took = std::chrono::steady_clock::now() - killed;
  ASSERT_EQ(rest.size(), 63u);
  size_t i = 0;
  while (i < rest.size() && rest[i].status == IBV_WC_SUCCESS) ++i;
  ASSERT_LT(i, rest.size()) << "everything completed before the kill";
  EXPECT_EQ(rest[i].status, IBV_WC_RETRY_EXC_ERR) << ibv().wc_status_str(rest[i].status);
  for (++i; i < rest.size(); ++i) EXPECT_EQ(rest[i].status, IBV_WC_WR_FLUSH_ERR);
  // 8 attempts of 67 ms would be 537 ms; the emulation caps the whole budget at 2 s.
  EXPECT_LT(took, 3s);
  EXPECT_GT(took, 200ms);
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
