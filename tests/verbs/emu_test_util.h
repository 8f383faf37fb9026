// GoogleTest helpers for the emulation tests: environment overrides, a connected loopback pair
// of endpoints, and the peer process of the cross-process tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "emu_harness.h"

namespace zipccl::verbs::emu_test {

using namespace std::chrono_literals;

// Sets (value non-null) or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();

 private:
  std::string name_, old_;
  bool had_;
};

// With the emulation knob `name` set to `value`, ibv_open_device fails with EINVAL (the knobs
// are read there). ASSERTs inside: call through ASSERT_NO_FATAL_FAILURE.
void expect_bad_knob_fails_open(const char* name, const char* value);

// Two endpoints of this process, connected to each other (loopback through the emulated
// fabric).
struct Pair {
  std::unique_ptr<Endpoint> a, b;
};
// ASSERTs inside: call through ASSERT_NO_FATAL_FAILURE.
void make_pair(Pair* pair, const EndpointOptions& a = {}, const EndpointOptions& b = {});

// Polls ep until one completion comes or timeout passes; fails the test on timeout.
ibv_wc wait_one(Endpoint& ep, std::chrono::milliseconds timeout = 5000ms);

// Waits for an async event on ep's context and acknowledges it; false when none comes within
// timeout (poll on its fd first, so a missing event fails the test instead of blocking it).
bool next_event(Endpoint& ep, ibv_async_event* ev, std::chrono::milliseconds timeout = 2000ms);

// The emulation's exports that the loader's table does not carry (completion channels, device
// GUID), looked up in the loaded library at IBVERBS_1.1.
struct ExtraFunctions {
  ibv_comp_channel* (*create_comp_channel)(ibv_context*);
  int (*destroy_comp_channel)(ibv_comp_channel*);
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**);
  void (*ack_cq_events)(ibv_cq*, unsigned int);
  __be64 (*get_device_guid)(ibv_device*);
};
const ExtraFunctions& extra();

// Fills [p, p + len) with bytes from seed.
void fill_random(char* p, size_t len, uint64_t seed);

// One signaled WR on qp over sge, for buffers other than an endpoint's own (READ: the landing
// range); 0 or post_send's errno.
int post_sge(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, const ibv_sge& sge,
             uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t imm = 0);

// The peer process (emu_peer), started with its stdin/stdout on pipes.
class Peer {
 public:
  Peer();
  ~Peer();  // kills it if still running
  bool started() const { return pid_ > 0; }
  const Address& address() const { return address_; }
  // Sends one command line and returns the answer line ("" when none came within timeout).
  std::string call(const std::string& command, std::chrono::milliseconds timeout = 5000ms);
  void kill_now();

 private:
  std::string read_line(std::chrono::milliseconds timeout);
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string pending_;
  Address address_;
};

}  // namespace zipccl::verbs::emu_test
