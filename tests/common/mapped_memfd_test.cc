// MappedMemfd: the emulated device memory and its DMA-BUF stand-in. What is written through the
// mapping is what the fd reads, the fd outlives the object once released, and failures say why.
#include "mapped_memfd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace zipccl {
namespace {

TEST(MappedMemfd, TheFdReadsWhatTheMappingHolds) {
  MappedMemfd m("mapped-memfd-test", 8192);
  ASSERT_TRUE(m.ok()) << m.error();
  ASSERT_EQ(m.size(), 8192u);
  EXPECT_EQ(m.data()[0], 0);
  EXPECT_EQ(m.data()[8191], 0);
  std::memset(m.data() + 4096, 0x5A, 16);
  char buf[16];
  ASSERT_EQ(pread(m.fd(), buf, sizeof buf, 4096), ssize_t(sizeof buf));
  EXPECT_EQ(std::vector<char>(buf, buf + 16), std::vector<char>(16, 0x5A));
}

TEST(MappedMemfd, AReleasedFdOutlivesTheObject) {
  int fd = -1;
  {
    MappedMemfd m("mapped-memfd-test", 100);
    ASSERT_TRUE(m.ok()) << m.error();
    m.data()[99] = 7;
    fd = m.release_fd();
    EXPECT_EQ(m.fd(), -1);
  }
  char c = 0;
  ASSERT_EQ(pread(fd, &c, 1, 99), 1) << "the fd was closed with the object";
  EXPECT_EQ(c, 7);
  EXPECT_EQ(close(fd), 0);
}

TEST(MappedMemfd, ZeroBytesMapOne) {
  MappedMemfd m("mapped-memfd-test", 0);
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m.size(), 1u);
}

TEST(MappedMemfd, AFailureSaysWhy) {
  MappedMemfd m("mapped-memfd-test", size_t(1) << 62);  // beyond what the kernel grants a file
  EXPECT_FALSE(m.ok());
  EXPECT_FALSE(m.error().empty());
  EXPECT_EQ(m.data(), nullptr);
}

}  // namespace
}  // namespace zipccl
