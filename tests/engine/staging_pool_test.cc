// StagingPool: buffers reused best-fit, grown rather than multiplied, each registered with the
// link while it exists (and the registration released before its memory goes).
#include <gtest/gtest.h>

#include <set>

#include "staging_pool.h"

namespace zipccl {
namespace {

// A link that only counts registrations.
class CountingLink : public Link {
 public:
  struct Reg : MemReg {
    Reg(CountingLink* l, const void* p) : link(l), ptr(p) { link->live.insert(p); }
    ~Reg() override { link->live.erase(ptr); }
    CountingLink* link;
    const void* ptr;
  };
  ncclResult_t reg_mem(void* data, size_t, std::unique_ptr<MemReg>* out) override {
    *out = std::make_unique<Reg>(this, data);
    return ncclSuccess;
  }
  ncclResult_t post_cts(const ClearToSend&) override { return ncclInternalError; }
  ncclResult_t poll_arrival(MessageHeader*, bool*) override { return ncclInternalError; }
  ncclResult_t poll_cts(ClearToSend*, bool*) override { return ncclInternalError; }
  ncclResult_t post_message(const MessageHeader&, const Placement&, const void*, Xfer*) override {
    return ncclInternalError;
  }
  ncclResult_t progress() override { return ncclSuccess; }
  ncclResult_t error() const override { return ncclSuccess; }
  std::string error_text() const override { return ""; }
  bool peer_closed() const override { return false; }
  std::string peer() const override { return "test"; }
  std::set<const void*> live;
};

TEST(StagingPool, ReusesBestFitAndRegistersWhatItHolds) {
  CountingLink link;
  StagingPool pool(&link);
  StagingPool::Buf a = pool.take(1000), b = pool.take(5000);
  EXPECT_GE(a.cap, 1000u);
  EXPECT_GE(b.cap, 5000u);
  EXPECT_EQ(link.live.size(), 2u);
  EXPECT_TRUE(link.live.count(a.p.get()) && link.live.count(b.p.get()));
  const char* small = a.p.get();
  pool.give(std::move(a));
  pool.give(std::move(b));
  StagingPool::Buf c = pool.take(900);
  EXPECT_EQ(c.p.get(), small) << "the smallest buffer that fits";
  EXPECT_EQ(pool.held_bytes(), 6000u);
  pool.give(std::move(c));
}

TEST(StagingPool, GrowsTheLargestFreeBufferInsteadOfAddingOne) {
  CountingLink link;
  StagingPool pool(&link);
  pool.give(pool.take(1000));
  StagingPool::Buf big = pool.take(1 << 20);
  EXPECT_GE(big.cap, size_t(1) << 20);
  EXPECT_EQ(pool.held_bytes(), size_t(1) << 20) << "the 1000-byte buffer was replaced";
  EXPECT_EQ(link.live.size(), 1u) << "its registration went with it";
  EXPECT_TRUE(link.live.count(big.p.get()));
  pool.give(std::move(big));
}

}  // namespace
}  // namespace zipccl
