// The emulated QP state machine and the checks made when work is posted.
#include <cstring>

#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
namespace {

constexpr int kInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;

class EmuQp : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ep_ = Endpoint::create({}, &error);
    ASSERT_NE(ep_, nullptr) << error;
    ibv_qp_init_attr init{};
    init.send_cq = ep_->cq();
    init.recv_cq = ep_->cq();
    init.qp_type = IBV_QPT_RC;
    init.cap = {8, 8, 2, 2, 0};
    qp_ = ibv().create_qp(ep_->pd(), &init);
    ASSERT_NE(qp_, nullptr);
    init_.qp_state = IBV_QPS_INIT;
    init_.port_num = 1;
    init_.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    rtr_.qp_state = IBV_QPS_RTR;
    rtr_.path_mtu = IBV_MTU_4096;
    rtr_.dest_qp_num = ep_->qp()->qp_num;
    rtr_.ah_attr.dlid = ep_->address().lid;
    rtr_.ah_attr.port_num = 1;
    rtr_.max_dest_rd_atomic = 1;
    rtr_.min_rnr_timer = 12;
    rts_.qp_state = IBV_QPS_RTS;
    rts_.timeout = 14;
    rts_.retry_cnt = 7;
    rts_.rnr_retry = 7;
    rts_.max_rd_atomic = 1;
  }
  void TearDown() override {
    if (qp_) {
      EXPECT_EQ(ibv().destroy_qp(qp_), 0);
    }
  }
  ibv_qp_state state() {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv().query_qp(qp_, &attr, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(attr.qp_state, qp_->state);
    return attr.qp_state;
  }
  int modify(ibv_qp_attr attr, int mask) { return ibv().modify_qp(qp_, &attr, mask); }
  int post_send() {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp_, &wr, &bad);
    if (rc) {
      EXPECT_EQ(bad, &wr);
    }
    return rc;
  }
  int post_recv() {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_recv(qp_, &wr, &bad);
    if (rc) {
      EXPECT_EQ(bad, &wr);
    }
    return rc;
  }

  std::unique_ptr<Endpoint> ep_;
  ibv_qp* qp_ = nullptr;
  ibv_qp_attr init_{}, rtr_{}, rts_{};
};

TEST_F(EmuQp, ValidPathToRtsWithPostingRules) {
  EXPECT_EQ(state(), IBV_QPS_RESET);
  EXPECT_EQ(qp_->qp_type, IBV_QPT_RC);
  EXPECT_NE(qp_->qp_num, ep_->qp()->qp_num);
  EXPECT_EQ(post_send(), EINVAL);
  EXPECT_EQ(post_recv(), EINVAL);  // nothing may be posted in RESET

  ASSERT_EQ(modify(init_, kInitMask), 0);
  EXPECT_EQ(state(), IBV_QPS_INIT);
  EXPECT_EQ(post_send(), EINVAL);
  EXPECT_EQ(post_recv(), 0);  // receives from INIT on
  ASSERT_EQ(modify(init_, kInitMask), 0);  // INIT -> INIT

  ASSERT_EQ(modify(rtr_, kRtrMask), 0);
  EXPECT_EQ(state(), IBV_QPS_RTR);
  EXPECT_EQ(post_send(), EINVAL);  // sends only from RTS
  ASSERT_EQ(modify(rts_, kRtsMask), 0);
  EXPECT_EQ(state(), IBV_QPS_RTS);

  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv().query_qp(qp_, &attr, IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_AV, &init), 0);
  EXPECT_EQ(attr.path_mtu, IBV_MTU_4096);
  EXPECT_EQ(attr.dest_qp_num, ep_->qp()->qp_num);
  EXPECT_EQ(attr.ah_attr.dlid, ep_->address().lid);
  EXPECT_EQ(attr.timeout, 14);
  EXPECT_EQ(attr.cap.max_send_wr, 8u);
  EXPECT_EQ(init.cap.max_recv_sge, 2u);
  EXPECT_EQ(init.send_cq, ep_->cq());

  // RTS -> RTS with an optional attribute; then to ERR and back through RESET.
  ibv_qp_attr rnr{};
  rnr.min_rnr_timer = 3;
  EXPECT_EQ(modify(rnr, IBV_QP_MIN_RNR_TIMER), 0);
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(modify(err, IBV_QP_STATE), 0);
  EXPECT_EQ(state(), IBV_QPS_ERR);
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(modify(reset, IBV_QP_STATE), 0);
  EXPECT_EQ(state(), IBV_QPS_RESET);
  EXPECT_EQ(modify(init_, kInitMask), 0);
}

TEST_F(EmuQp, InvalidTransitionsAndMasksAreRefused) {
  EXPECT_EQ(modify(rtr_, kRtrMask), EINVAL);                         // RESET -> RTR
  EXPECT_EQ(modify(rts_, kRtsMask), EINVAL);                         // RESET -> RTS
  EXPECT_EQ(modify(init_, kInitMask & ~IBV_QP_PORT), EINVAL);        // required missing
  EXPECT_EQ(modify(init_, kInitMask | IBV_QP_SQ_PSN), EINVAL);       // not allowed here
  ibv_qp_attr bad_port = init_;
  bad_port.port_num = 2;
  EXPECT_EQ(modify(bad_port, kInitMask), EINVAL);
  EXPECT_EQ(state(), IBV_QPS_RESET);  // nothing applied

  ASSERT_EQ(modify(init_, kInitMask), 0);
  EXPECT_EQ(modify(rts_, kRtsMask), EINVAL);                         // INIT -> RTS
  EXPECT_EQ(modify(rtr_, kRtrMask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
  ibv_qp_attr big_mtu = rtr_;
  big_mtu.path_mtu = static_cast<ibv_mtu>(6);
  EXPECT_EQ(modify(big_mtu, kRtrMask), EINVAL);
  ibv_qp_attr cur = rtr_;
  cur.cur_qp_state = IBV_QPS_RTS;  // wrong current state
  EXPECT_EQ(modify(cur, kRtrMask | IBV_QP_CUR_STATE), EINVAL);
  ASSERT_EQ(modify(rtr_, kRtrMask), 0);
  EXPECT_EQ(modify(rtr_, kRtrMask), EINVAL);                         // RTR -> RTR
  EXPECT_EQ(modify(rts_, kRtsMask & ~IBV_QP_RETRY_CNT), EINVAL);
  ibv_qp_attr retry = rts_;
  retry.retry_cnt = 8;
  EXPECT_EQ(modify(retry, kRtsMask), EINVAL);
  ASSERT_EQ(modify(rts_, kRtsMask), 0);
  ibv_qp_attr sqd{};
  sqd.qp_state = IBV_QPS_SQD;
  EXPECT_EQ(modify(sqd, IBV_QP_STATE), EINVAL);  // not emulated
  EXPECT_EQ(state(), IBV_QPS_RTS);
}

TEST_F(EmuQp, CreationLimits) {
  ibv_qp_init_attr init{};
  init.send_cq = ep_->cq();
  init.recv_cq = ep_->cq();
  init.qp_type = IBV_QPT_UD;
  init.cap = {8, 8, 1, 1, 0};
  errno = 0;
  EXPECT_EQ(ibv().create_qp(ep_->pd(), &init), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_sge = 31;
  EXPECT_EQ(ibv().create_qp(ep_->pd(), &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
  init.cap = {8, 8, 1, 1, 513};
  EXPECT_EQ(ibv().create_qp(ep_->pd(), &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // A CQ in use cannot go, nor the PD.
  EXPECT_EQ(ibv().destroy_cq(ep_->cq()), EBUSY);
  EXPECT_EQ(ibv().dealloc_pd(ep_->pd()), EBUSY);
}

TEST(EmuQpPosting, QueueCapacityCountsUntilCompletionsArePolled) {
  EndpointOptions o;
  o.max_send_wr = 4;
  o.max_recv_wr = 2;
  o.max_sge = 1;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p, o, o));
  // Three unsignaled writes and a signaled one fill the send queue; their slots come back only
  // when the signaled completion is polled, as providers reclaim send queue space.
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, i, 0, 8, false, p.b->addr(), p.b->mr()->rkey), 0);
  }
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 3, 0, 8, true, p.b->addr(), p.b->mr()->rkey), 0);
  EXPECT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 4, 0, 8, true, p.b->addr(), p.b->mr()->rkey), ENOMEM);
  ibv_wc wc = wait_one(*p.a);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(p.a->poll(1, 20ms).empty());  // unsignaled ones never complete
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 10 + i, 0, 8, true, p.b->addr(), p.b->mr()->rkey), 0);
  }
  EXPECT_EQ(p.a->poll(4, 5000ms).size(), 4u);

  EXPECT_EQ(p.b->post_recv(1, 0, 8), 0);
  EXPECT_EQ(p.b->post_recv(2, 0, 8), 0);
  EXPECT_EQ(p.b->post_recv(3, 0, 8), ENOMEM);

  // More SGEs than max_send_sge, and an opcode the emulation does not have.
  ibv_sge sges[2] = {{p.a->addr(), 1, p.a->mr()->lkey}, {p.a->addr(), 1, p.a->mr()->lkey}};
  ibv_send_wr wr{};
  wr.sg_list = sges;
  wr.num_sge = 2;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.a->qp(), &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  wr.num_sge = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  EXPECT_EQ(ibv_post_send(p.a->qp(), &wr, &bad), EINVAL);
}

TEST(EmuQpPosting, ListStopsAtTheFirstBadRequest) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  ibv_sge sge{p.a->addr(), 8, p.a->mr()->lkey};
  ibv_send_wr wrs[3]{};
  for (int i = 0; i < 3; ++i) {
    wrs[i].wr_id = i;
    wrs[i].sg_list = &sge;
    wrs[i].num_sge = 1;
    wrs[i].opcode = IBV_WR_RDMA_WRITE;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].wr.rdma.remote_addr = p.b->addr();
    wrs[i].wr.rdma.rkey = p.b->mr()->rkey;
    if (i < 2) wrs[i].next = &wrs[i + 1];
  }
  wrs[1].num_sge = -1;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.a->qp(), wrs, &bad), EINVAL);
  EXPECT_EQ(bad, &wrs[1]);
  // The first one was posted and completes; nothing else does.
  std::vector<ibv_wc> wcs = p.a->poll(2, 100ms);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 0u);
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
