// Running zip_peer processes from the tests: a receiver and a sender exchanging through the
// plugin, or one probe that only initialises it, and reading their RESULT lines.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "device_mem.h"
#include "spawn.h"

#define SKIP_WITHOUT_CUDA()                                    \
  do {                                                         \
    std::string why_;                                          \
    if (!::zipccl::client::have_cuda_device(&why_)) GTEST_SKIP() << why_; \
  } while (0)

namespace zipccl::test {

using Env = std::map<std::string, std::string>;

double now_s();
// The integer after " key=" in a RESULT line, -999 when absent.
long field(const std::string& line, const std::string& key);
std::string result_line(const Proc& p);

// What a fake peer needs from a listener's handle: both transports begin it with their TCP
// bootstrap handle (magic, version, 2 bytes, the listen address, the nonce).
struct HandleInfo {
  sockaddr_in addr;
  uint64_t nonce;
};
HandleInfo handle_info(const unsigned char* handle);
// The handle as zip_peer takes it (--handle=HEX) and prints it (HANDLE HEX).
std::string handle_hex(const unsigned char* handle, size_t n);
std::vector<unsigned char> handle_bytes(const std::string& hex);

// Whether this run tests the verbs transport (NCCL_ZIP_TRANSPORT=ib; main() sets the library).
bool ib_run();

struct Pair {
  int recv_rc = -1, send_rc = -1;
  std::string recv_result, send_result;
  std::string recv_summary, send_summary;  // the plugin's comm summaries at close, one per line
  double recv_exit_s = 0, send_exit_s = 0;  // when each was seen to exit
};

Env base_env(const std::string& zip);
std::vector<std::string> peer_args(const std::string& role, int version, const std::vector<std::string>& extra);

// Receiver first (it listens and prints the handle), then the sender with that handle.
// `between` runs after the handle is known and before the sender starts.
Pair run_pair(int version, const Env& env, const std::vector<std::string>& recv_extra,
              const std::vector<std::string>& send_extra, double timeout_s = 90,
              const std::function<void(const std::string&)>& between = nullptr);
void expect_ok(const Pair& p);

// zip_peer probe: init and the device list only. Its RESULT line (ok=0 when init failed), and
// its log in *log when given.
std::string probe(const Env& env, std::vector<std::string>* log = nullptr);

}  // namespace zipccl::test
