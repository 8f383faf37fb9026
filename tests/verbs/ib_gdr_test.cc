// The verbs transport's GPUDirect RDMA pieces over the emulated libibverbs, in one process:
// support probes, DMA-BUF registration (a memfd stands in for the dma-buf CUDA exports; the
// emulation takes the iova as the memory's address) and the flush of receives into such memory
// by a 1-byte RDMA read on a loopback queue pair. Device memory itself needs a GPU: the plugin
// suite's IbGdrExchange covers that where one exists.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gdr.h"
#include "ib_devices.h"
#include "ib_transport.h"
#include "transport.h"

namespace zipccl::verbs {
namespace {

constexpr size_t kBytes = 1 << 20;

void use_emulation() {
  setenv("NCCL_ZIP_IBVERBS_LIB", ZIP_VERBS_EMU_LIB, 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
}

// A shared memory file mapped here: memory with an fd, as a GPU buffer and its dma-buf.
struct MemFd {
  int fd = -1;
  char* p = nullptr;
  explicit MemFd(size_t bytes) {
    fd = memfd_create("zipccl-dmabuf", 0);
    if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0) return;
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    p = m == MAP_FAILED ? nullptr : static_cast<char*>(m);
  }
  ~MemFd() {
    if (p) munmap(p, kBytes);
    if (fd >= 0) close(fd);
  }
};

class IbConnGdr : public ::testing::Test {
 protected:
  void SetUp() override {
    use_emulation();
    std::string why;
    t_ = make_ib_transport(&why);
    ASSERT_TRUE(t_) << why;
    ASSERT_TRUE(t_->device(0).gdr_dmabuf) << "the emulation supports DMA-BUF by default";
    uint8_t handle[kTransportHandleBytes] = {};
    std::unique_ptr<Listener> l;
    std::unique_ptr<Connector> c;
    ASSERT_TRUE(t_->listen(0, handle, &l) == ncclSuccess);
    ASSERT_TRUE(t_->connect(0, handle, -1, &c) == ncclSuccess);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((!send_ || !recv_) && std::chrono::steady_clock::now() < end) {
      if (!send_) { ASSERT_TRUE(c->progress(&send_) == ncclSuccess); }
      if (!recv_) { ASSERT_TRUE(l->accept(&recv_) == ncclSuccess); }
    }
    ASSERT_TRUE(send_ && recv_) << "connection setup timed out";
  }

  // Progresses both ends until x is done; false on an error or after 20 s.
  bool wait(const Xfer& x) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!x.done() && std::chrono::steady_clock::now() < end)
      if (send_->progress() != ncclSuccess || recv_->progress() != ncclSuccess) return false;
    return x.done();
  }

  // One raw message of n bytes from src into dst, as the engine moves it: the receiver's
  // clear-to-send, the sender's message into that placement, the receiver's arrival.
  bool move(const char* src, char* dst, size_t n, uint32_t seq) {
    ClearToSend cts;
    cts.seq = seq;
    cts.n = 1;
    cts.p[0].capacity = n;
    cts.p[0].target = reinterpret_cast<uintptr_t>(dst);
    if (recv_->post_cts(cts) != ncclSuccess) return false;
    ClearToSend got_cts;
    MessageHeader arrived;
    bool got = false;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!got && std::chrono::steady_clock::now() < end)
      if (send_->poll_cts(&got_cts, &got) != ncclSuccess || recv_->progress() != ncclSuccess) return false;
    if (!got || got_cts.seq != seq || got_cts.n != 1 || got_cts.p[0].capacity != n) return false;
    MessageHeader h;
    h.seq = seq;
    h.wire_bytes = h.orig_bytes = n;
    Xfer tx;
    if (send_->post_message(h, got_cts.p[0], src, &tx) != ncclSuccess) return false;
    got = false;
    while (!got && std::chrono::steady_clock::now() < end)
      if (send_->progress() != ncclSuccess || recv_->progress() != ncclSuccess ||
          recv_->poll_arrival(&arrived, &got) != ncclSuccess)
        return false;
    return got && wait(tx) && arrived.seq == seq && arrived.sub == 0 && !arrived.compressed && arrived.wire_bytes == n;
  }

  std::unique_ptr<Transport> t_;
  std::unique_ptr<Link> send_, recv_;
};

TEST_F(IbConnGdr, DmaBufReceiveFlushedThenExact) {
  MemFd dst(kBytes);
  ASSERT_NE(dst.p, nullptr);
  std::unique_ptr<MemReg> rreg, sreg;
  ASSERT_TRUE(recv_->reg_device_mem(dst.p, kBytes, dst.fd, 0, true, &rreg) == ncclSuccess);
  std::vector<char> src(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src[i] = char(i * 7 + 3);
  ASSERT_TRUE(send_->reg_mem(src.data(), kBytes, &sreg) == ncclSuccess);
  // Twice, the second time at an offset inside the registration.
  uint32_t seq = 0;
  for (size_t off : {size_t(0), size_t(4096 + 100)}) {
    const size_t n = kBytes - off;
    Xfer fx;
    ASSERT_TRUE(move(src.data(), dst.p + off, n, seq++)) << recv_->error_text() << send_->error_text();
    ASSERT_TRUE(recv_->flush(dst.p + off, &fx) == ncclSuccess) << recv_->error_text();
    ASSERT_TRUE(wait(fx)) << recv_->error_text();
    EXPECT_EQ(std::memcmp(dst.p + off, src.data(), n), 0);
  }
}

TEST_F(IbConnGdr, UnalignedDmaBufRegistrationCoversItsPages) {
  MemFd dst(kBytes);
  ASSERT_NE(dst.p, nullptr);
  std::unique_ptr<MemReg> reg;
  // data at dma-buf offset 100: the registration starts at the page, offset 0 of the fd.
  EXPECT_TRUE(recv_->reg_device_mem(dst.p + 100, kBytes - 100, dst.fd, 100, true, &reg) == ncclSuccess);
  // An offset that does not reach back to the page start cannot be registered.
  MemFd other(kBytes);
  std::unique_ptr<MemReg> bad;
  EXPECT_FALSE(recv_->reg_device_mem(other.p + 100, 4096, other.fd, 50, true, &bad) == ncclSuccess);
}

TEST_F(IbConnGdr, FlushOfMemoryNotRegisteredForReceivesFails) {
  MemFd dst(kBytes);
  ASSERT_NE(dst.p, nullptr);
  std::unique_ptr<MemReg> reg;
  ASSERT_TRUE(recv_->reg_device_mem(dst.p, kBytes, dst.fd, 0, false, &reg) == ncclSuccess);
  Xfer fx;
  EXPECT_FALSE(recv_->flush(dst.p, &fx) == ncclSuccess);
  EXPECT_FALSE(recv_->error() == ncclSuccess) << "the connection's error is sticky";
  EXPECT_NE(recv_->error_text().find("flush"), std::string::npos) << recv_->error_text();
}

TEST(GdrProbe, PeermemFilesUnderRoot) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("zipccl-gdr-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "sys/module");
  EXPECT_FALSE(peermem_loaded(root.string()));
  for (const char* f : {"sys/module/nvidia_peermem/version", "sys/kernel/mm/memory_peers/nv_mem/version",
                        "sys/kernel/mm/memory_peers/nv_mem_nc/version"}) {
    fs::create_directories((root / f).parent_path());
    std::ofstream(root / f) << "1.0\n";
    EXPECT_TRUE(peermem_loaded(root.string())) << f;
    fs::remove(root / f);
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace zipccl::verbs
