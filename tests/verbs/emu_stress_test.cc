// Many WRs in flight with random sizes and several threads at once: bytes and completion order
// as an RC QP guarantees them.
#include <arpa/inet.h>

#include <array>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
namespace {

// Random-size writes, write-with-imms and sends, back to back over one QP; every byte checked,
// completions in posting order. With delay_us, deliveries are spread in time too.
void run_mixed_traffic(const char* fault_plan) {
  EndpointOptions o;
  o.buffer_bytes = 8 << 20;
  o.max_send_wr = 512;
  o.max_recv_wr = 512;
  o.sig_all = true;
  Pair p;
  std::string error;
  {
    ScopedEnv env("NCCL_ZIP_EMU_FAULT", fault_plan);
    p.a = Endpoint::create(o, &error);
  }
  ASSERT_NE(p.a, nullptr) << error;
  p.b = Endpoint::create(o, &error);
  ASSERT_NE(p.b, nullptr) << error;
  ASSERT_EQ(p.a->connect(p.b->address()), 0);
  ASSERT_EQ(p.b->connect(p.a->address()), 0);

  std::mt19937 rng(1234);
  fill_random(p.a->buffer(), o.buffer_bytes / 2, 9);
  struct Sent {
    ibv_wr_opcode op;
    size_t offset, len;
  };
  std::vector<Sent> sent;
  size_t offset = 0;
  size_t recv_offset = o.buffer_bytes / 2;
  int recvs = 0;
  for (int i = 0; i < 300; ++i) {
    size_t len = rng() % 3 ? rng() % 2048 : rng() % 60000;
    if (offset + len > o.buffer_bytes / 2) break;
    ibv_wr_opcode op = std::array<ibv_wr_opcode, 3>{IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
                                                    IBV_WR_SEND}[rng() % 3];
    if (op != IBV_WR_RDMA_WRITE) {
      // Sends land in receive buffers in the upper half, in order.
      ASSERT_EQ(p.b->post_recv(i, op == IBV_WR_SEND ? recv_offset : 0, op == IBV_WR_SEND ? len : 0), 0);
      ++recvs;
    }
    ASSERT_EQ(p.a->post(op, i, offset, len, true, p.b->addr(offset), p.b->mr()->rkey, htonl(i)), 0);
    sent.push_back({op, offset, len});
    if (op == IBV_WR_SEND) recv_offset += len;
    offset += len;
  }
  std::vector<ibv_wc> wcs = p.a->poll(sent.size(), 20000ms);
  ASSERT_EQ(wcs.size(), sent.size());
  for (size_t i = 0; i < wcs.size(); ++i) {
    ASSERT_EQ(wcs[i].status, IBV_WC_SUCCESS) << i;
    ASSERT_EQ(wcs[i].wr_id, i) << "requester completions out of order";
  }
  std::vector<ibv_wc> rwcs = p.b->poll(recvs, 5000ms);
  ASSERT_EQ(rwcs.size(), static_cast<size_t>(recvs));
  size_t r = 0, check_recv = o.buffer_bytes / 2;
  for (size_t i = 0; i < sent.size(); ++i) {
    const Sent& s = sent[i];
    if (s.op == IBV_WR_RDMA_WRITE) {
      ASSERT_EQ(std::memcmp(p.b->buffer() + s.offset, p.a->buffer() + s.offset, s.len), 0) << i;
      continue;
    }
    const ibv_wc& wc = rwcs[r++];
    ASSERT_EQ(wc.wr_id, i);  // receives consumed in order
    ASSERT_EQ(wc.byte_len, s.len);
    if (s.op == IBV_WR_RDMA_WRITE_WITH_IMM) {
      ASSERT_EQ(ntohl(wc.imm_data), i);
      ASSERT_EQ(std::memcmp(p.b->buffer() + s.offset, p.a->buffer() + s.offset, s.len), 0) << i;
    } else {
      ASSERT_EQ(std::memcmp(p.b->buffer() + check_recv, p.a->buffer() + s.offset, s.len), 0) << i;
      check_recv += s.len;
    }
  }
}

TEST(EmuStress, ManyInFlightRandomSizes) { run_mixed_traffic(nullptr); }

TEST(EmuStress, ManyInFlightRandomSizesWithDelays) { run_mixed_traffic("delay_us:200"); }

TEST(EmuStress, ThreadsPostAndPollConcurrently) {
  // Four connected pairs, each with a thread posting and one polling, all against the one
  // service thread. Receives are posted first so that no write meets RNR.
  constexpr int kThreads = 4, kWrites = 200;
  std::vector<Pair> pairs(kThreads);
  for (Pair& p : pairs) {
    ASSERT_NO_FATAL_FAILURE(make_pair(&p));
    for (int i = 0; i < kWrites; ++i) ASSERT_EQ(p.b->post_recv(i, 0, 0), 0);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Pair& p = pairs[t];
      for (int i = 0; i < kWrites; ++i) {
        std::memset(p.a->buffer() + i * 64, t * 16 + i % 16, 64);
        if (p.a->post(IBV_WR_RDMA_WRITE_WITH_IMM, i, i * 64, 64, true, p.b->addr(i * 64),
                      p.b->mr()->rkey, htonl(i)) != 0) {
          ++failures;
          return;
        }
      }
    });
    threads.emplace_back([&, t] {
      Pair& p = pairs[t];
      std::vector<ibv_wc> wcs = p.b->poll(kWrites, 20000ms);
      if (wcs.size() != static_cast<size_t>(kWrites)) ++failures;
      for (size_t i = 0; i < wcs.size(); ++i) {
        if (wcs[i].status != IBV_WC_SUCCESS || ntohl(wcs[i].imm_data) != i) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(pairs[t].a->poll(kWrites, 5000ms).size(), static_cast<size_t>(kWrites));
    EXPECT_EQ(std::memcmp(pairs[t].a->buffer(), pairs[t].b->buffer(), kWrites * 64), 0);
  }
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
