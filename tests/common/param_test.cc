// Knobs: parsed as integers within their bounds, anything else ignored (with a warning) for the
// default; read once, on first use.
#include <gtest/gtest.h>

#include <cstdlib>

#include "param.h"

namespace zipccl {
namespace {

TEST(EnvInt, ParsesWithinBoundsElseDefault) {
  setenv("ZIP_TEST_KNOB", "42", 1);
  EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 42);
  setenv("ZIP_TEST_KNOB", "0x10", 1);
  EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 16) << "not ours: NCCL's parsing";
  setenv("ZIP_TEST_KNOB", "010", 1);
  EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 8) << "not ours: NCCL's parsing";
  for (const char* bad : {"101", "-1", "12abc", "abc", "5 "}) {
    setenv("ZIP_TEST_KNOB", bad, 1);
    EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 7) << bad;
  }
  setenv("ZIP_TEST_KNOB", "", 1);
  EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 7);
  unsetenv("ZIP_TEST_KNOB");
  EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 7);
}

// NCCL_ZIP_* knobs are decimal: a leading zero is not octal, 0x is not a number.
TEST(EnvInt, OursAreDecimal) {
  setenv("NCCL_ZIP_TEST_KNOB", "010", 1);
  EXPECT_EQ(env_int("NCCL_ZIP_TEST_KNOB", 7, 0, 100), 10);
  setenv("NCCL_ZIP_TEST_KNOB", "0x10", 1);
  EXPECT_EQ(env_int("NCCL_ZIP_TEST_KNOB", 7, 0, 100), 7);
  unsetenv("NCCL_ZIP_TEST_KNOB");
}

// An ignored value is said on stderr too, where NCCL's log may be off.
TEST(EnvInt, IgnoredValuesAreSaidOnStderr) {
  setenv("NCCL_ZIP_TEST_KNOB", "abc", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(env_int("NCCL_ZIP_TEST_KNOB", 7, 0, 100), 7);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ignoring NCCL_ZIP_TEST_KNOB=abc"), std::string::npos) << err;
  unsetenv("NCCL_ZIP_TEST_KNOB");
}

ZIP_PARAM(test_once, "ZIP_TEST_ONCE", 3, 0, 10)
ZIP_STR_PARAM(test_str, "ZIP_TEST_STR")

TEST(ZipParam, ReadOnceOnFirstUse) {
  setenv("ZIP_TEST_ONCE", "9", 1);
  EXPECT_EQ(test_once(), 9);
  setenv("ZIP_TEST_ONCE", "1", 1);
  EXPECT_EQ(test_once(), 9) << "a knob keeps the value it was first read with";
  setenv("ZIP_TEST_STR", "eth0", 1);
  EXPECT_EQ(test_str(), "eth0");
}

}  // namespace
}  // namespace zipccl
