// StagingPool: buffers reused best-fit, grown rather than multiplied, each registered with the
// link while it exists (and the registration released before its memory goes); device staging
// from its arena only, under one registration of the whole arena.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "staging_arena.h"
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
  EXPECT_TRUE(link.live.count(a.p) && link.live.count(b.p));
  const char* small = a.p;
  pool.give(std::move(a));
  pool.give(std::move(b));
  StagingPool::Buf c = pool.take(900);
  EXPECT_EQ(c.p, small) << "the smallest buffer that fits";
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
  EXPECT_TRUE(link.live.count(big.p));
  pool.give(std::move(big));
}

TEST(StagingArena, FirstFitCoalescesAndRunsDry) {
  std::vector<char> mem(64 * StagingArena::kGrain);
  bool released = false;
  {
    StagingArena a(mem.data(), mem.size(), [&](char* p) { released = p == mem.data(); });
    char* x = a.alloc(1);
    char* y = a.alloc(StagingArena::kGrain + 1);
    char* z = a.alloc(10 * StagingArena::kGrain);
    ASSERT_TRUE(x && y && z);
    EXPECT_EQ(x, mem.data());
    EXPECT_EQ(y, x + StagingArena::kGrain);
    EXPECT_EQ(z, y + 2 * StagingArena::kGrain);
    EXPECT_EQ(a.used(), 13 * StagingArena::kGrain);
    EXPECT_EQ(a.alloc(52 * StagingArena::kGrain), nullptr) << "51 grains are left";
    a.free(y);
    a.free(x);  // merges with y's range
    EXPECT_EQ(a.alloc(3 * StagingArena::kGrain), x) << "x and y's ranges as one";
    a.free(x);
    a.free(z);  // everything free again, one range
    EXPECT_EQ(a.used(), 0u);
    EXPECT_EQ(a.alloc(64 * StagingArena::kGrain), mem.data());
    EXPECT_EQ(a.alloc(1), nullptr);
  }
  EXPECT_TRUE(released);
}

// With an arena, buffers come from it while it has room, then from the heap; each goes back to
// where it came from.
TEST(StagingPool, ArenaFirstThenHeap) {
  CountingLink link;
  std::vector<char> mem(16 * StagingArena::kGrain);
  auto arena = std::make_shared<StagingArena>(mem.data(), mem.size(), nullptr);
  {
    StagingPool pool(&link, arena);
    StagingPool::Buf a = pool.take(10 * StagingArena::kGrain);
    StagingPool::Buf b = pool.take(10 * StagingArena::kGrain);
    EXPECT_TRUE(a.gpu_mapped);
    EXPECT_EQ(a.p, mem.data());
    EXPECT_FALSE(b.gpu_mapped) << "the arena has 6 grains left";
    EXPECT_TRUE(b.p < mem.data() || b.p >= mem.data() + mem.size());
    EXPECT_EQ(arena->used(), 10 * StagingArena::kGrain);
    StagingPool::Buf moved = std::move(a);
    EXPECT_EQ(a.p, nullptr);
    EXPECT_TRUE(moved.gpu_mapped);
    pool.give(std::move(b));
    pool.give(std::move(moved));
    EXPECT_EQ(link.live.size(), 1u) << "the heap buffer waits in the pool; the arena's went back (10 of 16 grains used)";
    EXPECT_EQ(arena->used(), 0u);
  }
  EXPECT_TRUE(link.live.empty());
}

// The arena is shared by all comms of a GPU: while more than half of it is in use, a pool gives
// arena buffers back instead of keeping them, so a comm made later still gets arena memory.
TEST(StagingPool, GivesArenaBuffersBackWhileTheArenaIsMoreThanHalfUsed) {
  CountingLink link;
  std::vector<char> mem(16 * StagingArena::kGrain);
  auto arena = std::make_shared<StagingArena>(mem.data(), mem.size(), nullptr);
  StagingPool first(&link, arena), later(&link, arena);
  StagingPool::Buf small = first.take(2 * StagingArena::kGrain);
  first.give(std::move(small));
  EXPECT_EQ(arena->used(), 2 * StagingArena::kGrain) << "a quarter used: kept for reuse";
  StagingPool::Buf a = first.take(2 * StagingArena::kGrain), b = first.take(7 * StagingArena::kGrain);
  EXPECT_TRUE(a.gpu_mapped && b.gpu_mapped);
  first.give(std::move(b));
  EXPECT_EQ(arena->used(), 2 * StagingArena::kGrain) << "the 7-grain buffer went back (9 of 16 used when given)";
  first.give(std::move(a));
  EXPECT_EQ(arena->used(), 2 * StagingArena::kGrain) << "the 2-grain one is kept (2 of 16 used)";
  StagingPool::Buf c = later.take(12 * StagingArena::kGrain);
  EXPECT_TRUE(c.gpu_mapped) << "the later comm finds room";
  later.give(std::move(c));
  EXPECT_EQ(first.held_bytes(), 2 * StagingArena::kGrain);
  EXPECT_EQ(later.held_bytes(), 0u);
}

// A heap buffer taken while the arena was full moves into the arena when it is next taken and
// the arena has room.
TEST(StagingPool, AHeapBufferMovesIntoTheArenaOnceItHasRoom) {
  CountingLink link;
  std::vector<char> mem(16 * StagingArena::kGrain);
  auto arena = std::make_shared<StagingArena>(mem.data(), mem.size(), nullptr);
  StagingPool pool(&link, arena);
  StagingPool::Buf a = pool.take(10 * StagingArena::kGrain), b = pool.take(10 * StagingArena::kGrain);
  ASSERT_TRUE(a.gpu_mapped);
  ASSERT_FALSE(b.gpu_mapped);
  pool.give(std::move(a));  // back to the arena: 10 of 16 grains were in use
  pool.give(std::move(b));
  StagingPool::Buf c = pool.take(8 * StagingArena::kGrain);
  EXPECT_TRUE(c.gpu_mapped);
  EXPECT_GE(c.cap, 8 * StagingArena::kGrain);
  EXPECT_EQ(link.live.size(), 1u) << "the heap buffer and its registration are gone";
  EXPECT_EQ(pool.held_bytes(), c.cap);
  pool.give(std::move(c));
}

// Device staging: buffers from the arena only, none registered alone (the whole arena is, once,
// held by the pool until it goes); a full arena gives no buffer rather than heap memory.
TEST(StagingPool, DeviceStagingComesFromTheArenaOnly) {
  CountingLink link;
  std::vector<char> mem(16 * StagingArena::kGrain);
  auto arena = std::make_shared<StagingArena>(mem.data(), mem.size(), nullptr);
  {
    StagingPool pool(&link);
    EXPECT_FALSE(pool.device());
    std::unique_ptr<MemReg> whole;
    ASSERT_EQ(link.reg_mem(mem.data(), mem.size(), &whole), ncclSuccess);
    pool.set_device_arena(arena, std::move(whole));
    EXPECT_TRUE(pool.device());
    StagingPool::Buf a = pool.take(10 * StagingArena::kGrain);
    EXPECT_TRUE(a.gpu_mapped);
    EXPECT_EQ(a.p, mem.data());
    EXPECT_EQ(a.reg, nullptr) << "covered by the arena's registration";
    StagingPool::Buf none = pool.take(10 * StagingArena::kGrain);
    EXPECT_EQ(none.p, nullptr) << "6 grains left: no heap buffer for device staging";
    EXPECT_EQ(none.cap, 0u);
    EXPECT_EQ(pool.held_bytes(), 10 * StagingArena::kGrain);
    pool.give(std::move(none));  // an empty Buf is no buffer
    pool.give(std::move(a));     // 10 of 16 grains used: back to the arena
    EXPECT_EQ(arena->used(), 0u);
    StagingPool::Buf b = pool.take(4 * StagingArena::kGrain);
    pool.give(std::move(b));  // kept: a quarter used
    StagingPool::Buf grown = pool.take(12 * StagingArena::kGrain);
    EXPECT_EQ(grown.p, mem.data()) << "the free 4-grain buffer gave way to the larger one";
    EXPECT_EQ(pool.held_bytes(), 12 * StagingArena::kGrain);
    pool.give(std::move(grown));  // 12 of 16 grains used: back to the arena
    StagingPool::Buf other = StagingPool(&link, arena).take(1);
    EXPECT_NE(other.p, nullptr);
    StagingPool::Buf starved = pool.take(16 * StagingArena::kGrain);
    EXPECT_EQ(starved.p, nullptr) << "one grain is another pool's";
    EXPECT_EQ(link.live.size(), 1u) << "only the arena's registration";
  }
  EXPECT_TRUE(link.live.empty()) << "the arena's registration went with the pool";
}

}  // namespace
}  // namespace zipccl
