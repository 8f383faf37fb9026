// Async events and completion events: blocking readers, their wake-up at close, CQ overflow.
#include <fcntl.h>
#include <poll.h>

#include <atomic>
#include <future>
#include <thread>

#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
namespace {

TEST(EmuEvents, BlockedAsyncReaderGetsTheEvent) {
  Pair p;
  std::string error;
  {
    ScopedEnv env("NCCL_ZIP_EMU_FAULT", "qp_error:1");
    p.a = Endpoint::create({}, &error);
  }
  ASSERT_NE(p.a, nullptr) << error;
  p.b = Endpoint::create({}, &error);
  ASSERT_NE(p.b, nullptr) << error;
  ASSERT_EQ(p.a->connect(p.b->address()), 0);
  ASSERT_EQ(p.b->connect(p.a->address()), 0);
  // A reader blocked in get_async_event before anything happens, as NCCL's async thread is.
  ibv_context* ctx = p.a->context();
  auto reader = std::async(std::launch::async, [ctx] {
    ibv_async_event ev{};
    int rc = ibv().get_async_event(ctx, &ev);
    if (rc == 0) ibv().ack_async_event(&ev);
    return std::make_pair(rc, ev);
  });
  EXPECT_EQ(reader.wait_for(20ms), std::future_status::timeout);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 1, 0, 8, true, p.b->addr(), p.b->mr()->rkey), 0);
  ASSERT_EQ(reader.wait_for(5s), std::future_status::ready);
  auto [rc, ev] = reader.get();
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, p.a->qp());
  // Nothing more pending: the fd is not readable, and a non-blocking read says so.
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
  int flags = fcntl(ctx->async_fd, F_GETFL);
  ASSERT_EQ(fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  ibv_async_event none{};
  errno = 0;
  EXPECT_EQ(ibv().get_async_event(ctx, &none), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST(EmuEvents, CloseDeviceWakesABlockedReader) {
  int n = 0;
  ibv_device** list = ibv().get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ibv_context* ctx = ibv().open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  std::atomic<bool> entered{false};
  auto reader = std::async(std::launch::async, [ctx, &entered] {
    entered = true;
    ibv_async_event ev{};
    return ibv().get_async_event(ctx, &ev);
  });
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!entered && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(reader.wait_for(20ms), std::future_status::timeout);
  EXPECT_EQ(ibv().close_device(ctx), 0);
  ASSERT_EQ(reader.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(reader.get(), -1);
  ibv().free_device_list(list);
}

TEST(EmuEvents, CqOverflowRaisesCqError) {
  EndpointOptions small;
  small.cqe = 2;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p, small, {}));
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, i, 0, 8, true, p.b->addr(), p.b->mr()->rkey), 0);
  }
  pollfd pfd{p.a->context()->async_fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  ibv_async_event ev{};
  ASSERT_EQ(ibv().get_async_event(p.a->context(), &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, p.a->cq());
  ibv().ack_async_event(&ev);
  EXPECT_EQ(p.a->poll(3, 50ms).size(), 2u);  // the third completion was lost
}

TEST(EmuEvents, CompletionChannelSignalsArmedCq) {
  std::string error;
  auto a = Endpoint::create({}, &error);
  ASSERT_NE(a, nullptr) << error;
  ibv_comp_channel* ch = extra().create_comp_channel(a->context());
  ASSERT_NE(ch, nullptr);
  int tag = 0;
  ibv_cq* cq = ibv().create_cq(a->context(), 16, &tag, ch, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv().create_cq(a->context(), 16, nullptr, ch, 1), nullptr);  // one vector
  // A second QP of the same endpoint, whose completions go to the channel's CQ.
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {4, 4, 1, 1, 0};
  ibv_qp* qp = ibv().create_qp(a->pd(), &init);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(ibv().modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  Address me = a->address();
  me.qpn = qp->qp_num;
  me.psn = qp->qp_num;
  ASSERT_EQ(a->connect(me), 0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = a->qp()->qp_num;
  attr.rq_psn = a->address().psn;
  attr.min_rnr_timer = 1;
  attr.ah_attr.dlid = me.lid;
  attr.ah_attr.port_num = 1;
  ASSERT_EQ(ibv().modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);

  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ibv_sge sge{a->addr(), 0, a->mr()->lkey};
  ASSERT_EQ(post_recv_sges(qp, 5, &sge, 1), 0);
  ASSERT_EQ(a->post(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 0, true, 0, 0, 0), 0);
  pollfd pfd{ch->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  ibv_cq* got = nullptr;
  void* ctx = nullptr;
  ASSERT_EQ(extra().get_cq_event(ch, &got, &ctx), 0);
  EXPECT_EQ(got, cq);
  EXPECT_EQ(ctx, &tag);
  extra().ack_cq_events(got, 1);
  ibv_wc wc{};
  ASSERT_EQ(ibv_poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  // Not re-armed: no second event.
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
  EXPECT_EQ(extra().destroy_comp_channel(ch), EBUSY);
  EXPECT_EQ(ibv().destroy_qp(qp), 0);
  EXPECT_EQ(ibv().destroy_cq(cq), 0);
  EXPECT_EQ(extra().destroy_comp_channel(ch), 0);
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
