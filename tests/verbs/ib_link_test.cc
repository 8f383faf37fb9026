// The verbs transport's links against the Link contract, over the emulated libibverbs: one QP
// and, in a second binary (knobs are read once per process), two.
#include <cstdlib>

#include "ib_transport.h"
#include "link_contract.h"

namespace zipccl::test {
namespace {

LinkPair ib_pair() {
  setenv("NCCL_ZIP_IBVERBS_LIB", ZIP_VERBS_EMU_LIB, 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  std::string why;
  std::unique_ptr<Transport> t = verbs::make_ib_transport(&why);
  EXPECT_TRUE(t) << why;
  if (!t) return {};
  return connect_pair(std::move(t));
}

INSTANTIATE_TEST_SUITE_P(Verbs, LinkContract, ::testing::Values(ib_pair));

}  // namespace
}  // namespace zipccl::test
