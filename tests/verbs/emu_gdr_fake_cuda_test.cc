// What only the fake libcuda (fake_libcuda.cc) shows: how the emulation uses CUDA. Device bytes
// move only through CUDA copies, in the owning device's context, and a failed copy fails the
// transfer as the HCA's DMA would instead of delivering garbage.
#include <dlfcn.h>
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

struct FakeControls {
  void* (*alloc)(size_t, int);
  void (*release)(void*);
  uint64_t (*copies)();
  void (*fail_copies)(bool);
};

// After gdr::unavailable() has loaded the fake.
FakeControls controls() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  FakeControls c{};
  if (!lib) return c;
  c.alloc = reinterpret_cast<void* (*)(size_t, int)>(dlsym(lib, "zip_fake_cuda_alloc"));
  c.release = reinterpret_cast<void (*)(void*)>(dlsym(lib, "zip_fake_cuda_free"));
  c.copies = reinterpret_cast<uint64_t (*)()>(dlsym(lib, "zip_fake_cuda_copies"));
  c.fail_copies = reinterpret_cast<void (*)(bool)>(dlsym(lib, "zip_fake_cuda_fail_copies"));
  return c;
}

class EmuGdrFakeCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = gdr::unavailable();
    ASSERT_TRUE(why.empty()) << why;
    fake_ = controls();
    ASSERT_NE(fake_.fail_copies, nullptr);
    ASSERT_NO_FATAL_FAILURE(make_pair(&p_));
    dmabuf_fd_ = memfd_create("emu-dmabuf", MFD_CLOEXEC);  // only checked to be open
    ASSERT_GE(dmabuf_fd_, 0);
    // a's buffer on device 0, b's on device 1: each copy must run in its own device's context.
    for (int i = 0; i < 2; ++i) {
      dev_[i] = static_cast<char*>(fake_.alloc(kBytes, i));
      ASSERT_NE(dev_[i], nullptr);
      Endpoint& ep = i ? *p_.b : *p_.a;
      mr_[i] = ibv().reg_dmabuf_mr(ep.pd(), 0, kBytes, addr(i), dmabuf_fd_, kRemoteAccess);
      ASSERT_NE(mr_[i], nullptr) << std::strerror(errno);
    }
  }
  void TearDown() override {
    if (fake_.fail_copies) fake_.fail_copies(false);
    for (int i = 0; i < 2; ++i) {
      if (mr_[i]) ibv().dereg_mr(mr_[i]);
      if (dev_[i]) fake_.release(dev_[i]);
    }
    if (dmabuf_fd_ >= 0) close(dmabuf_fd_);
  }
  uint64_t addr(int i, size_t offset = 0) const {
    return reinterpret_cast<uintptr_t>(dev_[i]) + offset;
  }

  static constexpr size_t kBytes = 65536;
  FakeControls fake_{};
  Pair p_;
  int dmabuf_fd_ = -1;
  char* dev_[2] = {};
  ibv_mr* mr_[2] = {};
};

TEST_F(EmuGdrFakeCuda, DeviceBytesMoveOnlyThroughCudaCopies) {
  uint64_t before = fake_.copies();
  // Device 0 -> device 1: one copy out at the requester, one in at the responder.
  ASSERT_EQ(post_sge(p_.a->qp(), IBV_WR_RDMA_WRITE, 1, {addr(0), 1000, mr_[0]->lkey}, addr(1, 64),
                     mr_[1]->rkey),
            0);
  EXPECT_EQ(wait_one(*p_.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(fake_.copies(), before + 2);
  // Host -> host moves no device byte.
  ASSERT_EQ(p_.a->post(IBV_WR_RDMA_WRITE, 2, 0, 1000, true, p_.b->addr(0), p_.b->mr()->rkey), 0);
  EXPECT_EQ(wait_one(*p_.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(fake_.copies(), before + 2);
  // A two-SGE send from device 0 into one host receive: one copy per device SGE.
  ASSERT_EQ(p_.b->post_recv(3, 0, 4096), 0);
  ibv_sge sges[2] = {{addr(0, 0), 100, mr_[0]->lkey}, {addr(0, 5000), 200, mr_[0]->lkey}};
  ASSERT_EQ(post_sges(p_.a->qp(), IBV_WR_SEND, 4, sges, 2), 0);
  EXPECT_EQ(wait_one(*p_.a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(wait_one(*p_.b).status, IBV_WC_SUCCESS);
  EXPECT_EQ(fake_.copies(), before + 4);
}

TEST_F(EmuGdrFakeCuda, FailedCopyFromLocalSourceIsLocalProtectionError) {
  fake_.fail_copies(true);
  ASSERT_EQ(post_sge(p_.a->qp(), IBV_WR_RDMA_WRITE, 1, {addr(0), 1000, mr_[0]->lkey},
                     p_.b->addr(0), p_.b->mr()->rkey),
            0);
  EXPECT_EQ(wait_one(*p_.a).status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(EmuGdrFakeCuda, FailedCopyIntoRemoteTargetIsRemoteAccessError) {
  fake_.fail_copies(true);
  ASSERT_EQ(p_.a->post(IBV_WR_RDMA_WRITE, 1, 0, 1000, true, addr(1), mr_[1]->rkey), 0);
  EXPECT_EQ(wait_one(*p_.a).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(EmuGdrFakeCuda, FailedCopyOfReadSourceIsRemoteAccessError) {
  fake_.fail_copies(true);
  ASSERT_EQ(p_.a->post(IBV_WR_RDMA_READ, 1, 0, 1000, true, addr(1), mr_[1]->rkey), 0);
  EXPECT_EQ(wait_one(*p_.a).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(EmuGdrFakeCuda, FailedCopyIntoReadLandingIsLocalProtectionError) {
  fake_.fail_copies(true);
  ASSERT_EQ(post_sge(p_.a->qp(), IBV_WR_RDMA_READ, 1, {addr(0), 1000, mr_[0]->lkey},
                     p_.b->addr(0), p_.b->mr()->rkey),
            0);
  EXPECT_EQ(wait_one(*p_.a).status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(EmuGdrFakeCuda, FailedCopyIntoReceiveIsLocalProtectionErrorThere) {
  fake_.fail_copies(true);
  ibv_sge sge{addr(1), 4096, mr_[1]->lkey};
  ASSERT_EQ(post_recv_sges(p_.b->qp(), 7, &sge, 1), 0);
  ASSERT_EQ(p_.a->post(IBV_WR_SEND, 1, 0, 1000, true), 0);
  EXPECT_EQ(wait_one(*p_.b).status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(wait_one(*p_.a).status, IBV_WC_REM_OP_ERR);
}

}  // namespace
}  // namespace zipccl::verbs::emu_test
