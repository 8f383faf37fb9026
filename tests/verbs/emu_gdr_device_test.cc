// GPUDirect RDMA over the emulation on device memory (emu_gdr_device.h: cudaMalloc'd, or the
// fake libcuda's): registered through nvidia-peermem (ibv_reg_mr on the device pointer) and
// through DMA-BUF (ibv_reg_dmabuf_mr, iova = the device pointer), moved device->device,
// host->device and device->host by RDMA write, READ, SEND and write with immediate, and NCCL's
// flush READ from device memory. Every test skips where there is no device memory.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "emu_gdr_device.h"
#include "emu_test_util.h"

namespace zipccl::verbs::emu_test {
namespace {

constexpr int kRemoteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr size_t kBytes = 1 << 20;

#define SKIP_WITHOUT_DEVICE_MEMORY()                                  \
  do {                                                              \
    std::string why = gdr::unavailable();                           \
    if (!why.empty()) GTEST_SKIP() << why;                          \
  } while (0)

// One device buffer on device 0.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : ptr_(gdr::alloc(n)), size_(n) {}
  ~DeviceBuffer() {
    if (ptr_) gdr::release(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  uint64_t addr(size_t offset = 0) const { return reinterpret_cast<uintptr_t>(ptr_) + offset; }
  size_t size() const { return size_; }
  void upload(size_t offset, const void* src, size_t n) {
    ASSERT_TRUE(gdr::upload(static_cast<char*>(ptr_) + offset, src, n));
  }
  std::vector<char> download(size_t offset, size_t n) const {
    std::vector<char> out(n);
    EXPECT_TRUE(gdr::download(out.data(), static_cast<char*>(ptr_) + offset, n));
    return out;
  }

 private:
  void* ptr_;
  size_t size_;
};

// The DMA-BUF fd: the emulation only checks that it is open (it reaches the memory through the
// iova), so a memfd serves.
struct Fd {
  Fd() : fd(memfd_create("emu-dmabuf", MFD_CLOEXEC)) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  int fd;
};

enum class How { kPeermem, kDmabuf };

ibv_mr* register_device(ibv_pd* pd, const DeviceBuffer& buf, How how, int fd) {
  if (how == How::kPeermem) return ibv().reg_mr(pd, buf.get(), buf.size(), kRemoteAccess);
  return ibv().reg_dmabuf_mr(pd, 0, buf.size(), buf.addr(), fd, kRemoteAccess);
}

std::vector<char> random_bytes(size_t n, uint64_t seed) {
  std::vector<char> v(n);
  fill_random(v.data(), n, seed);
  return v;
}

TEST(EmuGdrDevice, DevicePointerNeedsPeermemOrDmabuf) {
  SKIP_WITHOUT_DEVICE_MEMORY();
  DeviceBuffer buf(kBytes);
  ASSERT_NE(buf.get(), nullptr);
  Fd fd;
  ASSERT_GE(fd.fd, 0);
  {
    ScopedEnv env("NCCL_ZIP_EMU_GDR", "dmabuf");
    std::string error;
    auto ep = Endpoint::create({}, &error);
    ASSERT_NE(ep, nullptr) << error;
    errno = 0;
    EXPECT_EQ(register_device(ep->pd(), buf, How::kPeermem, -1), nullptr);
    EXPECT_EQ(errno, EFAULT);  // a HCA without nvidia-peermem cannot pin device memory
    ibv_mr* mr = register_device(ep->pd(), buf, How::kDmabuf, fd.fd);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv().dereg_mr(mr), 0);
  }
  {
    ScopedEnv env("NCCL_ZIP_EMU_GDR", "peermem");
    std::string error;
    auto ep = Endpoint::create({}, &error);
    ASSERT_NE(ep, nullptr) << error;
    ibv_mr* mr = register_device(ep->pd(), buf, How::kPeermem, -1);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    EXPECT_EQ(mr->addr, buf.get());
    EXPECT_EQ(ibv().dereg_mr(mr), 0);
    errno = 0;
    EXPECT_EQ(register_device(ep->pd(), buf, How::kDmabuf, fd.fd), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
  }
  {
    ScopedEnv env("NCCL_ZIP_EMU_GDR", "none");
    std::string error;
    auto ep = Endpoint::create({}, &error);
    ASSERT_NE(ep, nullptr) << error;
    errno = 0;
    EXPECT_EQ(register_device(ep->pd(), buf, How::kPeermem, -1), nullptr);
    EXPECT_EQ(errno, EFAULT);
    EXPECT_EQ(register_device(ep->pd(), buf, How::kDmabuf, fd.fd), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
  }
}

// a and b each hold a device buffer registered the way under test, next to their endpoint's
// host buffer; every combination of host and device at both ends is checked byte for byte.
void every_direction(How how) {
  ScopedEnv env("NCCL_ZIP_EMU_GDR", how == How::kPeermem ? "peermem" : "dmabuf");
  Pair p;
  ASSERT_NO_FATAL_FAILURE(make_pair(&p));
  DeviceBuffer da(kBytes), db(kBytes);
  ASSERT_NE(da.get(), nullptr);
  ASSERT_NE(db.get(), nullptr);
  Fd fd;
  ASSERT_GE(fd.fd, 0);
  ibv_mr* ma = register_device(p.a->pd(), da, how, fd.fd);
  ibv_mr* mb = register_device(p.b->pd(), db, how, fd.fd);
  ASSERT_NE(ma, nullptr) << std::strerror(errno);
  ASSERT_NE(mb, nullptr) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(da.upload(0, random_bytes(kBytes, 1).data(), kBytes));
  ASSERT_NO_FATAL_FAILURE(db.upload(0, random_bytes(kBytes, 2).data(), kBytes));
  uint64_t id = 0;

  // Device -> device write.
  ASSERT_EQ(post_sge(p.a->qp(), IBV_WR_RDMA_WRITE, ++id, {da.addr(1000), 300000, ma->lkey},
                     db.addr(5000), mb->rkey),
            0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(db.download(5000, 300000), da.download(1000, 300000));

  // Host -> device write.
  fill_random(p.a->buffer(), 200000, 3);
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_WRITE, ++id, 0, 200000, true, db.addr(400000), mb->rkey), 0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(db.download(400000, 200000), std::vector<char>(p.a->buffer(), p.a->buffer() + 200000));

  // Device -> host write.
  ASSERT_EQ(post_sge(p.a->qp(), IBV_WR_RDMA_WRITE, ++id, {da.addr(600000), 100000, ma->lkey},
                     p.b->addr(10), p.b->mr()->rkey),
            0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::vector<char>(p.b->buffer() + 10, p.b->buffer() + 100010),
            da.download(600000, 100000));

  // READ from device memory into host memory, and into device memory.
  ASSERT_EQ(p.a->post(IBV_WR_RDMA_READ, ++id, 500000, 250000, true, db.addr(700000), mb->rkey), 0);
  ibv_wc r = wait_one(*p.a);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, 250000u);
  EXPECT_EQ(std::vector<char>(p.a->buffer() + 500000, p.a->buffer() + 750000),
            db.download(700000, 250000));
  ASSERT_EQ(post_sge(p.a->qp(), IBV_WR_RDMA_READ, ++id, {da.addr(0), 65536, ma->lkey},
                     db.addr(900000), mb->rkey),
            0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(da.download(0, 65536), db.download(900000, 65536));

  // Write with immediate into device memory, then a SEND from device memory scattered into a
  // device receive buffer.
  ASSERT_EQ(p.b->post_recv(++id, 0, 0), 0);
  ASSERT_EQ(post_sge(p.a->qp(), IBV_WR_RDMA_WRITE_WITH_IMM, ++id,
                     {da.addr(100000), 4096, ma->lkey}, db.addr(0), mb->rkey, 77),
            0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  ibv_wc imm = wait_one(*p.b);
  EXPECT_EQ(imm.status, IBV_WC_SUCCESS);
  EXPECT_EQ(imm.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(db.download(0, 4096), da.download(100000, 4096));
  ibv_sge recv_sge{db.addr(200000), 8192, mb->lkey};
  ASSERT_EQ(post_recv_sges(p.b->qp(), ++id, &recv_sge, 1), 0);
  ASSERT_EQ(post_sge(p.a->qp(), IBV_WR_SEND, ++id, {da.addr(800000), 6000, ma->lkey}), 0);
  EXPECT_EQ(wait_one(*p.a).status, IBV_WC_SUCCESS);
  ibv_wc recv = wait_one(*p.b);
  EXPECT_EQ(recv.status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv.byte_len, 6000u);
  EXPECT_EQ(db.download(200000, 6000), da.download(800000, 6000));

  EXPECT_EQ(ibv().dereg_mr(ma), 0);
  EXPECT_EQ(ibv().dereg_mr(mb), 0);
}

// NCCL's GDR flush: a loopback QP READs 1 byte (and more) of the device receive buffer into
// host memory of the same PD.
void loopback_flush(How how) {
  ScopedEnv env("NCCL_ZIP_EMU_GDR", how == How::kPeermem ? "peermem" : "dmabuf");
  std::string error;
  auto ep = Endpoint::create({}, &error);
  ASSERT_NE(ep, nullptr) << error;
  ASSERT_EQ(ep->connect(ep->address()), 0);
  DeviceBuffer buf(kBytes);
  ASSERT_NE(buf.get(), nullptr);
  Fd fd;
  ASSERT_GE(fd.fd, 0);
  ibv_mr* mr = register_device(ep->pd(), buf, how, fd.fd);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(buf.upload(0, random_bytes(kBytes, 4).data(), kBytes));
  uint64_t id = 0;
  for (size_t len : {size_t{1}, size_t{4096}, kBytes}) {
    std::memset(ep->buffer(), 0, len);
    ASSERT_EQ(ep->post(IBV_WR_RDMA_READ, ++id, 0, len, true, buf.addr(kBytes - len), mr->rkey), 0);
    ibv_wc wc = wait_one(*ep);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << len;
    EXPECT_EQ(wc.byte_len, len);
    EXPECT_EQ(std::vector<char>(ep->buffer(), ep->buffer() + len), buf.download(kBytes - len, len))
        << len;
  }
  EXPECT_EQ(ibv().dereg_mr(mr), 0);
}

TEST(EmuGdrDevice, PeermemRegionsEveryDirection) {
  SKIP_WITHOUT_DEVICE_MEMORY();
  every_direction(How::kPeermem);
}

TEST(EmuGdrDevice, DmabufRegionsEveryDirection) {
  SKIP_WITHOUT_DEVICE_MEMORY();
  every_direction(How::kDmabuf);
}

TEST(EmuGdrDevice, LoopbackFlushReadsPeermemRegion) {
  SKIP_WITHOUT_DEVICE_MEMORY();
  loopback_flush(How::kPeermem);
}

TEST(EmuGdrDevice, LoopbackFlushReadsDmabufRegion) {
  SKIP_WITHOUT_DEVICE_MEMORY();
  loopback_flush(How::kDmabuf);
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
