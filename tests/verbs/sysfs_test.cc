#include "sysfs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace zipccl::verbs {
namespace {

namespace fs = std::filesystem;

// A fake sysfs laid out like the kernel's: the class entry links into the PCI device's
// infiniband/ directory, whose "device" links back up to the PCI function.
class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/zipccl-sysfs-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = fs::canonical(tmpl).string();
    add_device("mlx5_1", "pci0000:00/0000:00:01.0/0000:17:00.1");
  }
  void TearDown() override { fs::remove_all(root_); }

  void add_device(const std::string& dev, const std::string& pci) {
    fs::path ibdir = fs::path(root_) / "sys/devices" / pci / "infiniband" / dev;
    fs::create_directories(ibdir);
    fs::create_symlink("../..", ibdir / "device");
    fs::create_directories(fs::path(root_) / "sys/class/infiniband");
    fs::create_symlink(fs::path("../../devices") / pci / "infiniband" / dev,
                       fs::path(root_) / "sys/class/infiniband" / dev);
  }

  void gid_type(const std::string& dev, int port, int index, const std::string& text) {
    fs::path dir = fs::path(root_) / "sys/class/infiniband" / dev / "ports" / std::to_string(port) /
                   "gid_attrs/types";
    fs::create_directories(dir);
    std::ofstream(dir / std::to_string(index)) << text;
  }

  std::string root_;
};

TEST_F(FakeSysfs, PciPathIsTheRealDeviceDirectory) {
  std::string error;
  EXPECT_EQ(ib_device_pci_path(root_, "mlx5_1", &error),
            root_ + "/sys/devices/pci0000:00/0000:00:01.0/0000:17:00.1");
  EXPECT_TRUE(error.empty()) << error;
}

TEST_F(FakeSysfs, MissingDeviceSaysWhy) {
  std::string error;
  EXPECT_EQ(ib_device_pci_path(root_, "mlx5_9", &error), "");
  EXPECT_NE(error.find("/sys/class/infiniband/mlx5_9/device"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
}

TEST(PciPath, MergedAsNccl) {
  const std::string dir = "/sys/devices/pci0000:00/0000:00:01.0/";
  EXPECT_EQ(merged_pci_path(dir + "0000:17:00.1", true), dir + "0000:17:00.0");
  EXPECT_EQ(merged_pci_path(dir + "0000:17:01.3", true), dir + "0000:17:00.0");  // VF -> PF
  EXPECT_EQ(merged_pci_path(dir + "0000:17:01.3", false), dir + "0000:17:01.0");
  EXPECT_EQ(merged_pci_path(dir + "0000:17:00.0", true), dir + "0000:17:00.0");
  EXPECT_EQ(merged_pci_path("", true), "");
  EXPECT_EQ(merged_pci_path("/sys/devices/virtual", true), "/sys/devices/virtual");
}

TEST_F(FakeSysfs, GidRoceVersions) {
  gid_type("mlx5_1", 1, 0, "IB/RoCE v1\n");
  gid_type("mlx5_1", 1, 1, "RoCE v2\n");
  gid_type("mlx5_1", 1, 2, "RoCE v1\n");
  gid_type("mlx5_1", 1, 3, "");
  gid_type("mlx5_1", 1, 4, "RoCE v9\n");
  EXPECT_EQ(gid_roce_version(root_, "mlx5_1", 1, 0), 1);
  EXPECT_EQ(gid_roce_version(root_, "mlx5_1", 1, 1), 2);
  EXPECT_EQ(gid_roce_version(root_, "mlx5_1", 1, 2), 1);
  EXPECT_EQ(gid_roce_version(root_, "mlx5_1", 1, 3), -1);  // empty
  EXPECT_EQ(gid_roce_version(root_, "mlx5_1", 1, 4), -1);  // unknown text
  EXPECT_EQ(gid_roce_version(root_, "mlx5_1", 1, 5), -1);  // missing
  EXPECT_EQ(gid_roce_version(root_, "mlx5_1", 2, 0), -1);  // no such port
}

}  // namespace
}  // namespace zipccl::verbs
