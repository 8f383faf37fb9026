#include "ibv_loader.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace zipccl::verbs {
namespace {

TEST(IbvLoader, MissingLibraryFailsWithItsName) {
  std::string error;
  auto lib = load_ibverbs("/nonexistent/libibverbs.so.1", &error);
  EXPECT_EQ(lib, nullptr);
  EXPECT_NE(error.find("cannot load /nonexistent/libibverbs.so.1"), std::string::npos) << error;
}

TEST(IbvLoader, LibraryLackingASymbolFailsNamingIt) {
  std::string error;
  auto lib = load_ibverbs(ZIP_FAKE_IBVERBS_PARTIAL, &error);
  EXPECT_EQ(lib, nullptr);
  EXPECT_NE(error.find("lacks IBVERBS_1.1 symbols: ibv_create_qp"), std::string::npos) << error;
  // Only the missing one is named.
  EXPECT_EQ(error.find("ibv_modify_qp"), std::string::npos) << error;
}

TEST(IbvLoader, VersionedFakeLoadsWithOptionalsByVersion) {
  std::string error;
  auto lib = load_ibverbs(ZIP_FAKE_IBVERBS_VERSIONED, &error);
  ASSERT_NE(lib, nullptr) << error;
  const IbvFunctions& f = lib->fn();
  EXPECT_NE(f.get_device_list, nullptr);
  EXPECT_NE(f.create_qp, nullptr);
  EXPECT_NE(f.wc_status_str, nullptr);
  EXPECT_EQ(lib->path(), ZIP_FAKE_IBVERBS_VERSIONED);
  // Exported at IBVERBS_1.8 as the loader asks; the two newer ones are absent.
  EXPECT_NE(f.reg_mr_iova2, nullptr);
  EXPECT_EQ(f.reg_dmabuf_mr, nullptr);
  EXPECT_EQ(f.query_port_speed, nullptr);
  // The table points into the loaded library, not at some other definition.
  void* self = dlopen(ZIP_FAKE_IBVERBS_VERSIONED, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(reinterpret_cast<void*>(f.create_qp), dlsym(self, "ibv_create_qp"));
  dlclose(self);
}

TEST(IbvLoader, PathFromEnvironment) {
  const char* old = std::getenv("NCCL_ZIP_IBVERBS_LIB");
  std::string saved = old ? old : "";
  setenv("NCCL_ZIP_IBVERBS_LIB", "/opt/emu/libibverbs-emu.so", 1);
  EXPECT_EQ(ibverbs_library_path(), "/opt/emu/libibverbs-emu.so");
  setenv("NCCL_ZIP_IBVERBS_LIB", "", 1);
  EXPECT_EQ(ibverbs_library_path(), "libibverbs.so.1");
  unsetenv("NCCL_ZIP_IBVERBS_LIB");
  EXPECT_EQ(ibverbs_library_path(), "libibverbs.so.1");
  if (old) setenv("NCCL_ZIP_IBVERBS_LIB", saved.c_str(), 1);
}

TEST(IbvLoader, RealLibibverbsLoadsWhenInstalled) {
  void* probe = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!probe) GTEST_SKIP() << "libibverbs.so.1 (rdma-core) is not installed";
  dlclose(probe);
  std::string error;
  auto lib = load_ibverbs("libibverbs.so.1", &error);
  ASSERT_NE(lib, nullptr) << error;
  EXPECT_NE(lib->fn().get_device_list, nullptr);
  EXPECT_NE(lib->fn().query_port, nullptr);
  // The real library names its enums: a sanity check that the pointers are the right functions.
  EXPECT_STREQ(lib->fn().wc_status_str(IBV_WC_SUCCESS), "success");
}

}  // namespace
}  // namespace zipccl::verbs
