// NCCL_ZIP_EMU_FAULT: each injected fault, as the transport's tests will use them. The plan is
// read when a device is opened and counts the send WRs posted on that context.

#include <cstring>
#include <map>

#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
namespace {

// A pair whose requester (a) was opened under the fault plan; b has none.
void faulty_pair(Pair* p, const char* plan, EndpointOptions oa = {}) {
  std::string error;
  {
    ScopedEnv env("NCCL_ZIP_EMU_FAULT", plan);
    p->a = Endpoint::create(oa, &error);
  }
  ASSERT_NE(p->a, nullptr) << error;
  p->b = Endpoint::create({}, &error);
  ASSERT_NE(p->b, nullptr) << error;
  ASSERT_EQ(p->a->connect(p->b->address()), 0);
  ASSERT_EQ(p->b->connect(p->a->address()), 0);
}

void post_writes(Pair& p, int n) {
  for (int i = 1; i <= n; ++i) {
    ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, i, 0, 64, true, p.b->addr(i * 64), p.b->mr()->rkey), 0);
  }
}

TEST(EmuFaults, RkeyFailsTheNthRdmaOperation) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(faulty_pair(&p, "rkey:3"));
  // A send does not count: the third RDMA operation is wr 4.
  ASSERT_EQ(p.b->post_recv(1, 0, 64), 0);
  ASSERT_EQ(p.a->post(IBV_WR_SEND, 100, 0, 64, true), 0);
  ASSERT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  fill_random(p.a->buffer(), 64, 1);
  ASSERT_NO_FATAL_FAILURE(post_writes(p, 4));
  std::vector<ibv_wc> wcs = p.a->poll(4, 5000ms);
  ASSERT_EQ(wcs.size(), 4u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[2].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wcs[2].wr_id, 3u);
  EXPECT_EQ(wcs[3].status, IBV_WC_WR_FLUSH_ERR);
  // Target memory of the failed write untouched, the earlier ones landed.
  EXPECT_EQ(std::memcmp(p.b->buffer() + 64, p.a->buffer(), 64), 0);
  EXPECT_EQ(std::string(p.b->buffer() + 3 * 64, 64), std::string(64, '\0'));
}

TEST(EmuFaults, RetryExhaustsOnTheNthRequest) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(faulty_pair(&p, "retry:2"));
  auto start = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(post_writes(p, 3));
  std::vector<ibv_wc> wcs = p.a->poll(3, 5000ms);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[2].status, IBV_WC_WR_FLUSH_ERR);
  // timeout 8 (about 1 ms) x 4 attempts.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST(EmuFaults, QpErrorAfterNRequestsRaisesQpFatal) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(faulty_pair(&p, "qp_error:2"));
  ASSERT_NO_FATAL_FAILURE(post_writes(p, 2));
  std::vector<ibv_wc> wcs = p.a->poll(2, 5000ms);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);  // the second completes, then the QP fails
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(*p.a, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, p.a->qp());
  EXPECT_EQ(p.a->qp()->state, IBV_QPS_ERR);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 3, 0, 8, false, p.b->addr(), p.b->mr()->rkey), 0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_WR_FLUSH_ERR);
}

TEST(EmuFaults, DeviceLostAfterNRequests) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(faulty_pair(&p, "device_lost:1"));
  ASSERT_EQ(p.a->post_recv(50, 0, 8), 0);
  ASSERT_NO_FATAL_FAILURE(post_writes(p, 1));
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(*p.a, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_DEVICE_FATAL);
  EXPECT_STREQ(ibv().event_type_str(ev.event_type), "local catastrophic error");
  // The completion that came first, then the posted receive flushes.
  std::vector<ibv_wc> wcs = p.a->poll(2, 5000ms);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].wr_id, 50u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  // Every later verb fails; destroying still works (the endpoint's destructor does it).
  EXPECT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 2, 0, 8, true, p.b->addr(), p.b->mr()->rkey), EIO);
  EXPECT_EQ(p.a->post_recv(51, 0, 8), EIO);
  ibv_device_attr dattr;
  EXPECT_EQ(ibv().query_device(p.a->context(), &dattr), EIO);
  ibv_port_attr pattr{};
  EXPECT_EQ(ibv().query_port(p.a->context(), 1, &pattr), EIO);
  errno = 0;
  EXPECT_EQ(ibv().alloc_pd(p.a->context()), nullptr);
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(ibv().create_cq(p.a->context(), 1, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(ibv().reg_mr(p.a->pd(), p.a->buffer(), 64, IBV_ACCESS_LOCAL_WRITE), nullptr);
  // The other context is unaffected.
  EXPECT_EQ(ibv().query_device(p.b->context(), &dattr), 0);
}

TEST(EmuFaults, DelayKeepsPerQpOrder) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(faulty_pair(&p, "delay_us:300"));
  // Writes to the same bytes: the last one posted must be what stays.
  for (int i = 0; i < 50; ++i) {
    std::memset(p.a->buffer() + i * 16, i, 16);
    ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, i, i * 16, 16, true, p.b->addr(), p.b->mr()->rkey), 0);
  }
  std::vector<ibv_wc> wcs = p.a->poll(50, 5000ms);
  ASSERT_EQ(wcs.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i));
  EXPECT_EQ(std::string(p.b->buffer(), 16), std::string(16, '\x31'));
}

TEST(EmuFaults, BadPlanFailsOpen) {
  ASSERT_NO_FATAL_FAILURE(expect_bad_knob_fails_open("NCCL_ZIP_EMU_FAULT", "rkey:x"));
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
