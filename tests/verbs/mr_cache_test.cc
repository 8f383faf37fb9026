// The verbs transport's MR cache over the emulated libibverbs: one registration serves every
// range within its pages, references are counted, and the last release deregisters.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "ib_hca.h"
#include "ibv_loader.h"
#include "mr_cache.h"

namespace zipccl::verbs {
namespace {

constexpr size_t kPage = 4096;

class MrCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    lib_ = load_ibverbs(ZIP_VERBS_EMU_LIB, &error);
    ASSERT_TRUE(lib_) << error;
    int n = 0;
    ibv_device** list = lib_->fn().get_device_list(&n);
    ASSERT_NE(list, nullptr);
    ASSERT_GE(n, 1);
    hca_ = IbHca::open(lib_, list[0], &error);
    lib_->fn().free_device_list(list);
    ASSERT_TRUE(hca_) << error;
    cache_ = std::make_shared<MrCache>(hca_, hca_->fn(), hca_->pd(), hca_->name());
    buf_ = static_cast<char*>(std::aligned_alloc(kPage, 4 * kPage));
  }
  void TearDown() override { std::free(buf_); }

  MrRef acquire(size_t off, size_t len) {
    MrRef r;
    EXPECT_TRUE(cache_->acquire(buf_ + off, len, &r) == ncclSuccess);
    EXPECT_TRUE(r);
    return r;
  }

  std::shared_ptr<IbvLibrary> lib_;
  std::shared_ptr<IbHca> hca_;
  std::shared_ptr<MrCache> cache_;
  char* buf_ = nullptr;
};

TEST_F(MrCacheTest, RangesWithinItsPagesShareOneRegistration) {
  MrRef a = acquire(0, 100);
  MrRef b = acquire(200, 50);
  MrRef c = acquire(kPage - 96, 96);  // past the first range, still in its page
  EXPECT_EQ(cache_->registrations(), 1u);
  EXPECT_EQ(a.lkey(), b.lkey());
  EXPECT_EQ(a.rkey(), c.rkey());
  a = MrRef();
  b = MrRef();
  EXPECT_EQ(cache_->registrations(), 1u) << "still referenced";
  c = MrRef();
  EXPECT_EQ(cache_->registrations(), 0u) << "the last reference deregisters";
}

TEST_F(MrCacheTest, RangesBeyondARegistrationGetTheirOwn) {
  MrRef first = acquire(0, kPage);
  MrRef second = acquire(kPage, 100);
  EXPECT_EQ(cache_->registrations(), 2u);
  MrRef straddling = acquire(kPage - 8, 16);  // covered by neither alone
  EXPECT_EQ(cache_->registrations(), 3u);
  EXPECT_NE(straddling.lkey(), first.lkey());
  EXPECT_NE(straddling.lkey(), second.lkey());
  MrRef inner = acquire(kPage + 8, 8);  // any registration covering it will do
  EXPECT_EQ(cache_->registrations(), 3u);
  MrRef moved = std::move(inner);
  EXPECT_FALSE(inner);
  EXPECT_TRUE(moved);
}

// PCIe relaxed ordering, as NCCL asks for it: the access bit through ibv_reg_mr_iova2 (the bit is
// optional, which plain ibv_reg_mr cannot carry); off without that entry point.
decltype(IbvFunctions::reg_mr_iova2) g_real_iova2 = nullptr;
int g_iova2_access = -1;
ibv_mr* recording_iova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned int access) {
  g_iova2_access = int(access);
  return g_real_iova2(pd, addr, len, iova, access);
}

TEST_F(MrCacheTest, RelaxedOrderingThroughRegMrIova2) {
  IbvFunctions fn = hca_->fn();  // outlives the caches below, which keep a reference
  g_real_iova2 = fn.reg_mr_iova2;
  ASSERT_NE(g_real_iova2, nullptr) << "the emulation exports ibv_reg_mr_iova2@IBVERBS_1.8";
  fn.reg_mr_iova2 = recording_iova2;
  {
    auto ro = std::make_shared<MrCache>(hca_, fn, hca_->pd(), hca_->name(), true);
    EXPECT_TRUE(ro->relaxed_ordering());
    g_iova2_access = -1;
    MrRef r;
    ASSERT_TRUE(ro->acquire(buf_, 100, &r) == ncclSuccess);
    ASSERT_NE(g_iova2_access, -1);
    EXPECT_TRUE(g_iova2_access & IBV_ACCESS_RELAXED_ORDERING);
    EXPECT_TRUE(g_iova2_access & IBV_ACCESS_REMOTE_WRITE);
  }
  {
    auto plain = std::make_shared<MrCache>(hca_, fn, hca_->pd(), hca_->name(), false);
    EXPECT_FALSE(plain->relaxed_ordering());
    g_iova2_access = -1;
    MrRef r;
    ASSERT_TRUE(plain->acquire(buf_, 100, &r) == ncclSuccess);
    EXPECT_EQ(g_iova2_access, -1) << "plain ibv_reg_mr";
  }
  fn.reg_mr_iova2 = nullptr;  // a library before IBVERBS_1.8
  EXPECT_FALSE(std::make_shared<MrCache>(hca_, fn, hca_->pd(), hca_->name(), true)->relaxed_ordering());
}

TEST_F(MrCacheTest, ReferencesKeepTheCacheAndDeviceAlive) {
  MrRef r = acquire(0, 10);
  std::weak_ptr<MrCache> weak = cache_;
  cache_.reset();
  hca_.reset();
  EXPECT_FALSE(weak.expired());
  r = MrRef();  // deregisters, then the cache and the device close
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace zipccl::verbs
