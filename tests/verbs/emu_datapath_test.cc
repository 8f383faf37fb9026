// The emulated data path between two QPs of this process: every operation the transport uses,
// with the bytes and completions checked.
#include <arpa/inet.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
namespace {

TEST(EmuDataPath, SendLandsInPostedReceive) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  fill_random(p.a->buffer(), 1000, 1);
  ASSERT_EQ(p.b->post_recv(7, 4096, 2000), 0);
  ASSERT_EQ(p.a->post(IBV_WR_SEND, 1, 0, 1000, true), 0);
  ibv_wc s = wait_one(*p.a);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_EQ(s.opcode, IBV_WC_SEND);
  EXPECT_EQ(s.wr_id, 1u);
  EXPECT_EQ(s.qp_num, p.a->qp()->qp_num);
  ibv_wc r = wait_one(*p.b);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_EQ(r.wr_id, 7u);
  EXPECT_EQ(r.byte_len, 1000u);
  EXPECT_EQ(r.src_qp, p.a->qp()->qp_num);
  EXPECT_EQ(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(std::memcmp(p.b->buffer() + 4096, p.a->buffer(), 1000), 0);
}

TEST(EmuDataPath, SendWithImmediate) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  ASSERT_EQ(p.b->post_recv(1, 0, 64), 0);
  ASSERT_EQ(p.a->post(IBV_WR_SEND_WITH_IMM, 1, 0, 10, true, 0, 0, htonl(0xabcd1234)), 0);
  ibv_wc r = wait_one(*p.b);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(ntohl(r.imm_data), 0xabcd1234u);
  EXPECT_EQ(r.byte_len, 10u);
}

TEST(EmuDataPath, RdmaWriteLandsWithoutReceiveCompletion) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  fill_random(p.a->buffer(), 300000, 2);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 5, 0, 300000, true, p.b->addr(1000), p.b->mr()->rkey), 0);
  ibv_wc s = wait_one(*p.a);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_EQ(s.opcode, IBV_WC_RDMA_WRITE);
  // Completed means applied at the target.
  EXPECT_EQ(std::memcmp(p.b->buffer() + 1000, p.a->buffer(), 300000), 0);
  EXPECT_TRUE(p.b->poll(1, 20ms).empty());
}

TEST(EmuDataPath, WriteWithImmediateConsumesReceive) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  fill_random(p.a->buffer(), 5000, 3);
  ASSERT_EQ(p.b->post_recv(42, 0, 0), 0);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 5000, true, p.b->addr(8192),
                      p.b->mr()->rkey, htonl(77)),
            0);
  ibv_wc r = wait_one(*p.b);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(r.wr_id, 42u);
  EXPECT_EQ(r.byte_len, 5000u);
  EXPECT_EQ(ntohl(r.imm_data), 77u);
  EXPECT_EQ(std::memcmp(p.b->buffer() + 8192, p.a->buffer(), 5000), 0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
}

TEST(EmuDataPath, ZeroLengthWriteWithImmediateNeedsNoKey) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  ASSERT_EQ(p.b->post_recv(1, 0, 0), 0);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 0, true, 0, 0, htonl(5)), 0);
  ibv_wc r = wait_one(*p.b);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, 0u);
  EXPECT_EQ(ntohl(r.imm_data), 5u);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
}

TEST(EmuDataPath, RdmaReadFetchesRemoteBytes) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  fill_random(p.b->buffer() + 100, 70000, 4);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_READ, 9, 500000, 70000, true, p.b->addr(100), p.b->mr()->rkey), 0);
  ibv_wc s = wait_one(*p.a);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_EQ(s.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(s.byte_len, 70000u);
  EXPECT_EQ(std::memcmp(p.a->buffer() + 500000, p.b->buffer() + 100, 70000), 0);
}

TEST(EmuDataPath, MultiSgeGatherAndScatter) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  fill_random(p.a->buffer(), 4096, 5);
  // Gather 3 pieces (one of them empty) into one send, scattered over 2 receive pieces.
  ibv_sge send_sges[3] = {{p.a->addr(0), 100, p.a->mr()->lkey},
                          {p.a->addr(1000), 0, p.a->mr()->lkey},
                          {p.a->addr(2000), 300, p.a->mr()->lkey}};
  ibv_sge recv_sges[2] = {{p.b->addr(0), 250, p.b->mr()->lkey},
                          {p.b->addr(10000), 1000, p.b->mr()->lkey}};
  ASSERT_EQ(post_recv_sges(p.b->qp(), 1, recv_sges, 2), 0);
  ASSERT_EQ(post_sges(p.a->qp(), IBV_WR_SEND, 2, send_sges, 3), 0);
  ibv_wc r = wait_one(*p.b);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, 400u);
  std::string sent = std::string(p.a->buffer(), 100) + std::string(p.a->buffer() + 2000, 300);
  std::string got = std::string(p.b->buffer(), 250) + std::string(p.b->buffer() + 10000, 150);
  EXPECT_EQ(got, sent);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
}

TEST(EmuDataPath, InlineSendCopiesAtPostTime) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  ASSERT_EQ(p.b->post_recv(1, 0, 64), 0);
  char local[48];
  std::memset(local, 'x', sizeof(local));
  // Inline data needs no lkey: the buffer is not registered.
  ibv_sge sge{reinterpret_cast<uintptr_t>(local), sizeof(local), 0};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a->qp(), &wr, &bad), 0);
  std::memset(local, 'y', sizeof(local));  // reusable at once
  ibv_wc r = wait_one(*p.b);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::string(p.b->buffer(), 48), std::string(48, 'x'));
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);

  // Over max_inline_data (64) is refused at post time, with bad_wr set.
  char big[65] = {};
  sge = {reinterpret_cast<uintptr_t>(big), sizeof(big), 0};
  bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.a->qp(), &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

TEST(EmuDataPath, RoceAndGrhAddressing) {
  ScopedEnv env("NCCL_ZIP_EMU_DEVICES", "ib0:ib,roce0:roce");
  EndpointOptions roce;
  roce.device = "roce0";  // GID index 3 (IPv4-mapped), always with a GRH
  EndpointOptions ib_grh;
  ib_grh.device = "ib0";
  ib_grh.use_grh = true;
  for (const EndpointOptions& o : {roce, ib_grh}) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(&p, o, o));
    fill_random(p.a->buffer(), 1000, 6);
    ASSERT_EQ(p.b->post_recv(1, 0, 1000), 0);
    ASSERT_EQ(p.a->post(IBV_WR_SEND, 1, 0, 1000, true), 0);
    EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS) << o.device;
    ibv_wc r = wait_one(*p.b);
    EXPECT_EQ(r.status, IBV_WC_SUCCESS);
    if (std::string(o.device) == "roce0") {
      EXPECT_NE(r.wc_flags & IBV_WC_GRH, 0u);
    }
    EXPECT_EQ(std::memcmp(p.b->buffer(), p.a->buffer(), 1000), 0);
  }
  // RoCE cannot be addressed without a GRH.
  std::string error;
  auto ep = Endpoint::create(roce, &error);
  ASSERT_NE(ep, nullptr) << error;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 2;
  a.ah_attr.dlid = 1;
  a.ah_attr.port_num = 1;
  EXPECT_EQ(ibv().modify_qp(ep->qp(), &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            EINVAL);
}

TEST(EmuDataPath, IovaRegionIsAddressedByIova) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  // 64 KiB of b's buffer registered as iova 0x10000000.
  ibv_mr* mr = ibv().reg_mr_iova2(p.b->pd(), p.b->buffer() + 65536, 65536, 0x10000000,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  fill_random(p.a->buffer(), 100, 7);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 1, 0, 100, true, 0x10000000 + 10, mr->rkey), 0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(p.b->buffer() + 65536 + 10, p.a->buffer(), 100), 0);
  EXPECT_EQ(ibv().dereg_mr(mr), 0);
}

TEST(EmuDataPath, DmabufRegionTakesIovaAsItsAddress) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  // A memfd stands for the DMA-BUF; the emulation reaches the memory through the iova, which
  // is where this process mapped it.
  int fd = memfd_create("emu-dmabuf", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  void* map = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  uint64_t iova = reinterpret_cast<uintptr_t>(map);
  ibv_mr* mr = ibv().reg_dmabuf_mr(p.b->pd(), 0, 8192, iova, fd,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  fill_random(p.a->buffer(), 4000, 8);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 1, 0, 4000, true, iova + 4000, mr->rkey), 0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(static_cast<char*>(map) + 4000, p.a->buffer(), 4000), 0);
  EXPECT_EQ(ibv().dereg_mr(mr), 0);
  munmap(map, 8192);
  close(fd);
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
