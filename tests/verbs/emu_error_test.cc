// Errors as hardware reports them: remote access violations, receiver-side length and key
// errors, RNR, a vanished peer QP; the requester QP goes to ERR and everything outstanding
// flushes.
#include <arpa/inet.h>

#include <cstring>
#include <map>

#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
namespace {

// Posts a bad write (as `corrupt` makes it) followed by a good one and a receive on the
// requester; checks the error, the flushes, the untouched target and the target's QP.
void expect_remote_access_error(Pair& p, uint64_t remote_addr, uint32_t rkey, size_t len,
                                ibv_wr_opcode op = IBV_WR_RDMA_WRITE) {
  fill_random(p.a->buffer(), len, 21);
  uint64_t before = fnv1a(p.b->buffer(), 1 << 20);
  ASSERT_EQ(p.a->post_recv(100, 0, 16), 0);
  ASSERT_EQ(p.a->post(op, 1, 0, len, false, remote_addr, rkey), 0);  // unsignaled: errors still complete
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 2, 0, 8, true, p.b->addr(), p.b->mr()->rkey), 0);
  std::vector<ibv_wc> wcs = p.a->poll(3, 5000ms);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR) << ibv().wc_status_str(wcs[0].status);
  // The rest flush; write 2 may have been posted before or after the QP went to ERR, so its
  // place relative to the receive's flush is not fixed.
  std::map<uint64_t, ibv_wc_status> rest = {{wcs[1].wr_id, wcs[1].status},
                                            {wcs[2].wr_id, wcs[2].status}};
  EXPECT_EQ(rest, (std::map<uint64_t, ibv_wc_status>{{2, IBV_WC_WR_FLUSH_ERR},
                                                     {100, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_EQ(p.a->qp()->state, IBV_QPS_ERR);
  EXPECT_EQ(fnv1a(p.b->buffer(), 1 << 20), before) << "target memory was written";
  // The responder reports it as an async event and errs too.
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(*p.b, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.element.qp, p.b->qp());
  EXPECT_EQ(p.b->qp()->state, IBV_QPS_ERR);
  // Posting on an ERR QP is accepted and flushes.
  ASSERT_EQ(p.a->post(IBV_WR_SEND, 3, 0, 8, false), 0);
  ibv_wc wc = wait_one(*p.a);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

TEST(EmuErrors, BadRkey) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  expect_remote_access_error(p, p.b->addr(), p.b->mr()->rkey ^ 0x5a5a, 100);
}

TEST(EmuErrors, LocalKeyIsNotARemoteKey) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  expect_remote_access_error(p, p.b->addr(), p.b->mr()->lkey, 100);
}

TEST(EmuErrors, RangeOutsideTheRegion) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  // One byte past the end; and an address below the start.
  expect_remote_access_error(p, p.b->addr((1 << 20) - 99), p.b->mr()->rkey, 100);
}

TEST(EmuErrors, RangeBelowTheRegion) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  expect_remote_access_error(p, p.b->addr() - 1, p.b->mr()->rkey, 100);
}

TEST(EmuErrors, RegionWithoutRemoteWrite) {
  EndpointOptions read_only;
  read_only.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p, {}, read_only));
  expect_remote_access_error(p, p.b->addr(), p.b->mr()->rkey, 100);
}

TEST(EmuErrors, QpWithoutRemoteWrite) {
  EndpointOptions no_write;
  no_write.qp_access = IBV_ACCESS_REMOTE_READ;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p, {}, no_write));
  expect_remote_access_error(p, p.b->addr(), p.b->mr()->rkey, 100);
}

TEST(EmuErrors, ReadNeedsRemoteRead) {
  EndpointOptions write_only;
  write_only.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p, {}, write_only));
  expect_remote_access_error(p, p.b->addr(), p.b->mr()->rkey, 100, IBV_WR_RDMA_READ);
}

TEST(EmuErrors, SendLargerThanReceiveBuffer) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  ASSERT_EQ(p.b->post_recv(1, 0, 100), 0);
  ASSERT_EQ(p.b->post_recv(2, 100, 100), 0);
  ASSERT_EQ(p.a->post(IBV_WR_SEND, 1, 0, 101, true), 0);
  ibv_wc s = wait_one(*p.a);
  EXPECT_EQ(s.status, IBV_WC_REM_INV_REQ_ERR);
  std::vector<ibv_wc> r = p.b->poll(2, 5000ms);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(r[0].wr_id, 1u);
  EXPECT_EQ(r[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(r[1].wr_id, 2u);
}

TEST(EmuErrors, ReceiveBufferWithoutLocalWrite) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  ibv_mr* read_only = ibv().reg_mr(p.b->pd(), p.b->buffer(), 4096, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(read_only, nullptr);
  ibv_sge sge{p.b->addr(), 100, read_only->lkey};
  ASSERT_EQ(post_recv_sges(p.b->qp(), 4, &sge, 1), 0);
  ASSERT_EQ(p.a->post(IBV_WR_SEND, 1, 0, 100, true), 0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_REM_OP_ERR);
  ibv_wc r = wait_one(*p.b);
  EXPECT_EQ(r.wr_id, 4u);
  EXPECT_EQ(r.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(ibv().dereg_mr(read_only), 0);
}

TEST(EmuErrors, PathMtuMismatchIsAnInvalidRequest) {
  std::string error;
  auto a = Endpoint::create({}, &error);  // connects with path MTU 4096
  ASSERT_NE(a, nullptr) << error;
  auto b = Endpoint::create({}, &error);
  ASSERT_NE(b, nullptr) << error;
  ASSERT_EQ(a->connect(b->address()), 0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = a->qp()->qp_num;
  attr.rq_psn = a->address().psn;
  attr.max_dest_rd_atomic = 1;
  attr.ah_attr.dlid = a->address().lid;
  attr.ah_attr.port_num = 1;
  ASSERT_EQ(ibv().modify_qp(b->qp(), &attr,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  // Up to 1024 bytes fit b's MTU; more does not.
  ASSERT_EQ(a->post(IBV_WR_RDMA_WRITE, 1, 0, 1024, true, b->addr(), b->mr()->rkey), 0);
  EXPECT_EQ(wait_one(*a).status, IBV_WC_SUCCESS);
  ASSERT_EQ(a->post(IBV_WR_RDMA_WRITE, 2, 0, 1025, true, b->addr(), b->mr()->rkey), 0);
  EXPECT_EQ(wait_one(*a).status, IBV_WC_REM_INV_REQ_ERR);
}

TEST(EmuErrors, BadLocalKey) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  ibv_sge sge{p.a->addr(), 8, p.a->mr()->lkey + 1};
  // Found when executed, not at post.
  ASSERT_EQ(post_sges(p.a->qp(), IBV_WR_RDMA_WRITE, 9, &sge, 1, 0, p.b->addr(), p.b->mr()->rkey), 0);
  ibv_wc wc = wait_one(*p.a);
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(p.a->qp()->state, IBV_QPS_ERR);
}

TEST(EmuErrors, ReceiverNotReadyRetriesThenFails) {
  EndpointOptions o;
  o.rnr_retry = 2;
  o.min_rnr_timer = 1;  // 10 us
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p, o, o));
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(p.a->post(IBV_WR_SEND, 1, 0, 8, true), 0);
  ibv_wc wc = wait_one(*p.a);
  EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(EmuErrors, ReceiverNotReadyWithInfiniteRetrySucceedsOnceReceivePosted) {
  EndpointOptions o;
  o.rnr_retry = 7;
  o.min_rnr_timer = 1;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p, o, o));
  fill_random(p.a->buffer(), 100, 3);
  ASSERT_EQ(p.a->post(IBV_WR_SEND, 1, 0, 100, true), 0);
  // A write behind the send must wait for it: it may not overtake the retried send.
  std::memset(p.b->buffer() + 5000, 0, 100);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 2, 0, 100, true, p.b->addr(5000), p.b->mr()->rkey), 0);
  EXPECT_TRUE(p.a->poll(1, 50ms).empty());  // many RNR rounds, no completion
  EXPECT_EQ(p.b->buffer()[5000], 0);
  ASSERT_EQ(p.b->post_recv(7, 0, 100), 0);
  std::vector<ibv_wc> wcs = p.a->poll(2, 5000ms);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wait_one(*p.b).wr_id, 7u);
  EXPECT_EQ(std::memcmp(p.b->buffer(), p.a->buffer(), 100), 0);
  EXPECT_EQ(std::memcmp(p.b->buffer() + 5000, p.a->buffer(), 100), 0);
}

TEST(EmuErrors, DestroyedPeerQpTimesOut) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));  // timeout 8 (1 ms) x (retry_cnt 3 + 1)
  ASSERT_EQ(ibv().destroy_qp(p.b->qp()), 0);
  // Keep the endpoint's destructor from destroying it again: a fresh QP in its place.
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = p.b->cq();
  init.qp_type = IBV_QPT_RC;
  init.cap = {1, 1, 1, 1, 0};
  ibv_qp* replacement = ibv().create_qp(p.b->pd(), &init);
  ASSERT_NE(replacement, nullptr);
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 1, 0, 8, true, p.b->addr(), p.b->mr()->rkey), 0);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 2, 0, 8, true, p.b->addr(), p.b->mr()->rkey), 0);
  std::vector<ibv_wc> wcs = p.a->poll(2, 5000ms);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(ibv().destroy_qp(replacement), 0);
}

TEST(EmuErrors, PeerNotYetReadyIsRetriedUntilItIs) {
  // Hardware retransmits while the responder is still in INIT: if it reaches RTR within the
  // retry budget, the transfer succeeds.
  EndpointOptions slow;
  slow.timeout = 14;  // 67 ms per attempt
  slow.retry_cnt = 7;
  std::string error;
  auto a = Endpoint::create(slow, &error);
  ASSERT_NE(a, nullptr) << error;
  auto b = Endpoint::create({}, &error);
  ASSERT_NE(b, nullptr) << error;
  ASSERT_EQ(a->connect(b->address()), 0);
  fill_random(a->buffer(), 64, 8);
  ASSERT_EQ(a->post(IBV_WR_RDMA_WRITE, 1, 0, 64, true, b->addr(), b->mr()->rkey), 0);
  EXPECT_TRUE(a->poll(1, 30ms).empty());
  ASSERT_EQ(b->connect(a->address()), 0);
  ibv_wc wc = wait_one(*a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(b->buffer(), a->buffer(), 64), 0);
}

TEST(EmuErrors, UnroutableAddressTimesOut) {
  std::string error;
  auto a = Endpoint::create({}, &error);
  ASSERT_NE(a, nullptr) << error;
  Address nowhere = a->address();
  nowhere.lid = 0xBFFE == nowhere.lid ? 0xBFFD : 0xBFFE;  // most likely nobody's
  nowhere.qpn = 12345;
  ASSERT_EQ(a->connect(nowhere), 0);
  ASSERT_EQ(a->post(IBV_WR_SEND, 1, 0, 8, true), 0);
  EXPECT_EQ(wait_one(*a, 3000ms).status, IBV_WC_RETRY_EXC_ERR);
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
