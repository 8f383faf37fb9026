// What the GPUDirect RDMA path needs from the emulation, on host memory (every machine): the
// DMA-BUF support probe under each NCCL_ZIP_EMU_GDR value, DMA-BUF regions on both ends of
// transfers, and loopback QPs as NCCL's flush uses them. The same on CUDA device memory is in
// emu_gdr_device_test.cc.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
namespace {

constexpr int kRemoteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// A memfd stands for the DMA-BUF: the emulation only checks that the fd is open and reaches
// the memory through the iova, here where this process mapped the memfd.
struct FakeDmabuf {
  explicit FakeDmabuf(size_t n) : size(n) {
    fd = memfd_create("emu-dmabuf", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(n)) == 0) {
      void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) map = static_cast<char*>(m);
    }
  }
  ~FakeDmabuf() {
    if (map) munmap(map, size);
    if (fd >= 0) close(fd);
  }
  uint64_t iova(size_t offset = 0) const { return reinterpret_cast<uintptr_t>(map) + offset; }
  size_t size;
  int fd = -1;
  char* map = nullptr;
};

TEST(EmuGdr, DmabufProbeFollowsTheKnob) {
  struct Case {
    const char* env;
    int probe_errno;
  };
  for (const Case& c : {Case{nullptr, EBADF}, Case{"dmabuf", EBADF}, Case{"peermem,dmabuf", EBADF},
                        Case{"peermem", EOPNOTSUPP}, Case{"none", EOPNOTSUPP}}) {
    const char* name = c.env ? c.env : "unset";
    ScopedEnv env("NCCL_ZIP_EMU_GDR", c.env);
    std::string error;
    auto ep = Endpoint::create({}, &error);
    ASSERT_NE(ep, nullptr) << name << ": " << error;
    // NCCL's probe: supported when the call fails with anything but EOPNOTSUPP.
    errno = 0;
    EXPECT_EQ(ibv().reg_dmabuf_mr(ep->pd(), 0, 0, 0, -1, 0), nullptr) << name;
    EXPECT_EQ(errno, c.probe_errno) << name;
    // Without support a real registration fails the same way, fd and memory valid.
    FakeDmabuf buf(4096);
    ASSERT_NE(buf.map, nullptr);
    errno = 0;
    ibv_mr* mr = ibv().reg_dmabuf_mr(ep->pd(), 0, 4096, buf.iova(), buf.fd, kRemoteAccess);
    if (c.probe_errno == EOPNOTSUPP) {
      EXPECT_EQ(mr, nullptr) << name;
      EXPECT_EQ(errno, EOPNOTSUPP) << name;
    } else {
      ASSERT_NE(mr, nullptr) << name << ": " << std::strerror(errno);
      EXPECT_EQ(ibv().dereg_mr(mr), 0);
    }
    // Host memory registers through its address whatever the knob says.
    mr = ibv().reg_mr(ep->pd(), ep->buffer(), 4096, kRemoteAccess);
    ASSERT_NE(mr, nullptr) << name;
    EXPECT_EQ(ibv().dereg_mr(mr), 0);
  }
}

TEST(EmuGdr, BadKnobFailsOpenDevice) {
  ASSERT_NO_FATAL_FAILURE(expect_bad_knob_fails_open("NCCL_ZIP_EMU_GDR", "dmabuf,gdr"));
}

// A DMA-BUF region at both ends: written into and read from remotely, and the local source and
// landing range of transfers through its lkey.
TEST(EmuGdr, DmabufRegionOnBothEndsOfWritesAndReads) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  FakeDmabuf buf(65536);
  ASSERT_NE(buf.map, nullptr);
  ibv_mr* mr = ibv().reg_dmabuf_mr(p.b->pd(), 0, buf.size, buf.iova(), buf.fd, kRemoteAccess);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);

  fill_random(p.a->buffer(), 20000, 1);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, 1, 0, 20000, true, buf.iova(100), mr->rkey), 0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf.map + 100, p.a->buffer(), 20000), 0);

  ASSERT_EQ(p.a->post(IBV_WR_RDMA_READ, 2, 300000, 20000, true, buf.iova(100), mr->rkey), 0);
  ibv_wc r = wait_one(*p.a);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, 20000u);
  EXPECT_EQ(std::memcmp(p.a->buffer() + 300000, buf.map + 100, 20000), 0);

  // b sends from the region and lands a READ in it.
  fill_random(buf.map + 40000, 5000, 2);
  ASSERT_EQ(post_sge(p.b->qp(), IBV_WR_RDMA_WRITE, 3, {buf.iova(40000), 5000, mr->lkey},
                     p.a->addr(600000), p.a->mr()->rkey),
            0);
  EXPECT_EQ(wait_one(*p.b).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(p.a->buffer() + 600000, buf.map + 40000, 5000), 0);
  fill_random(p.a->buffer() + 700000, 3000, 3);
  ASSERT_EQ(post_sge(p.b->qp(), IBV_WR_RDMA_READ, 4, {buf.iova(50000), 3000, mr->lkey},
                     p.a->addr(700000), p.a->mr()->rkey),
            0);
  EXPECT_EQ(wait_one(*p.b).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf.map + 50000, p.a->buffer() + 700000, 3000), 0);
  EXPECT_EQ(ibv().dereg_mr(mr), 0);
}

// NCCL's GDR flush: a QP connected to itself (its own QP number and address) READs from the
// receive buffer's MR into a host buffer of the same PD.
TEST(EmuGdr, LoopbackQpReadsAndWritesItsOwnPd) {
  ScopedEnv devices("NCCL_ZIP_EMU_DEVICES", "ib0:ib,roce0:roce");
  for (const char* device : {"ib0", "roce0"}) {
    EndpointOptions o;
    o.device = device;
    std::string error;
    auto ep = Endpoint::create(o, &error);
    ASSERT_NE(ep, nullptr) << error;
    ASSERT_EQ(ep->connect(ep->address()), 0) << device;
    std::vector<char> received(1 << 20);
    fill_random(received.data(), received.size(), 4);
    ibv_mr* mr = ibv().reg_mr(ep->pd(), received.data(), received.size(), kRemoteAccess);
    ASSERT_NE(mr, nullptr);
    uint64_t base = reinterpret_cast<uintptr_t>(received.data());

    // The flush itself: 1 byte, then larger ranges, into the endpoint's own MR.
    uint64_t id = 0;
    for (size_t len : {size_t{1}, size_t{4096}, size_t{300000}, received.size()}) {
      std::memset(ep->buffer(), 0, len);
      ASSERT_EQ(ep->post(IBV_WR_RDMA_READ, ++id, 0, len, true, base + received.size() - len,
                         mr->rkey),
                0);
      ibv_wc wc = wait_one(*ep);
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << device << " " << len;
      EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
      EXPECT_EQ(wc.byte_len, len);
      EXPECT_EQ(std::memcmp(ep->buffer(), received.data() + received.size() - len, len), 0)
          << device << " " << len;
    }
    // And a write the other way.
    fill_random(ep->buffer(), 70000, 5);
    ASSERT_EQ(ep->post(IBV_WR_RDMA_WRITE, ++id, 0, 70000, true, base + 12345, mr->rkey), 0);
    EXPECT_EQ(wait_one(*ep).status, IBV_WC_SUCCESS) << device;
    EXPECT_EQ(std::memcmp(received.data() + 12345, ep->buffer(), 70000), 0) << device;
    EXPECT_EQ(ibv().dereg_mr(mr), 0);
  }
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
