// The socket transport's links against the Link contract, over loopback, with one data socket and
// with several (messages striped over them); a clear-to-send for every receive, as the contract
// has it (receives that let the sender push instead: push_test.cc).
#include <cstdlib>

#include "link_contract.h"
#include "socket_transport.h"

namespace zipccl::test {
namespace {

LinkPair socket_pair(const char* threads, const char* socks) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("NCCL_SOCKET_NTHREADS", threads, 1);
  setenv("NCCL_NSOCKS_PERTHREAD", socks, 1);
  setenv("NCCL_ZIP_SOCKET_PUSH", "0", 1);
  return connect_pair(tcp::make_socket_transport());
}

// The knobs are read once per process: every pair of this binary has the same sockets, 2 x 2.
INSTANTIATE_TEST_SUITE_P(Socket, LinkContract, ::testing::Values([] { return socket_pair("2", "2"); }));

}  // namespace
}  // namespace zipccl::test
