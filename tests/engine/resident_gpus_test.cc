// The resident kernels' size: NCCL_ZIP_GPU_CTAS unset (as here), CTAs enough for the link the
// net plugin's init names, and the nominal rate the tuner plans with at that size, which keeps
// up with the link by the policy's margin wherever 16 CTAs do.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine_params.h"
#include "policy.h"
#include "resident_gpus.h"

namespace zipccl {
namespace {

TEST(ResidentCtas, SizedToTheLink) {
  ASSERT_EQ(getenv("NCCL_ZIP_GPU_CTAS"), nullptr) << "the test reads the default";
  const struct {
    double gbit;
    int ctas;
  } cases[] = {{0, 16}, {1, 4}, {10, 4}, {25, 6}, {32, 8}, {40, 10}, {50, 12}, {70, 16}, {400, 16}};
  for (const auto& c : cases) {
    const double link = c.gbit * 1e9 / 8;
    set_resident_link(link);
    EXPECT_EQ(resident_ctas(), c.ctas) << c.gbit << " Gb/s";
    if (link > 0 && c.ctas < 16) {
      EXPECT_TRUE(codec_keeps_up(nominal_coding_rate(true), link)) << c.gbit << " Gb/s";
    }
  }
  set_resident_link(0);
  EXPECT_EQ(nominal_coding_rate(true), 16 * 0.65e9);
  EXPECT_EQ(nominal_coding_rate(false), double(cpu_threads()) * 1e9);
}

}  // namespace
}  // namespace zipccl
