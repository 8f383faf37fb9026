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
  EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 16);
  for (const char* bad : {"101", "-1", "12abc", "abc", "5 "}) {
    setenv("ZIP_TEST_KNOB", bad, 1);
    EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 7) << bad;
  }
  setenv("ZIP_TEST_KNOB", "", 1);
  EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 7);
  unsetenv("ZIP_TEST_KNOB");
  EXPECT_EQ(env_int("ZIP_TEST_KNOB", 7, 0, 100), 7);
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
