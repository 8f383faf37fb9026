#include "emu_test_util.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <random>
#include <type_traits>

namespace zipccl::verbs::emu_test {

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  const char* old = std::getenv(name);
  had_ = old != nullptr;
  if (had_) old_ = old;
  if (value) {
    setenv(name, value, 1);
  } else {
    unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (had_) {
    setenv(name_.c_str(), old_.c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

void expect_bad_knob_fails_open(const char* name, const char* value) {
  ScopedEnv env(name, value);
  int n = 0;
  ibv_device** list = ibv().get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 1);
  errno = 0;
  EXPECT_EQ(ibv().open_device(list[0]), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv().free_device_list(list);
}

void make_pair(Pair* pair, const EndpointOptions& a, const EndpointOptions& b) {
  std::string error;
  pair->a = Endpoint::create(a, &error);
  ASSERT_NE(pair->a, nullptr) << error;
  pair->b = Endpoint::create(b, &error);
  ASSERT_NE(pair->b, nullptr) << error;
  ASSERT_EQ(pair->a->connect(pair->b->address()), 0);
  ASSERT_EQ(pair->b->connect(pair->a->address()), 0);
}

ibv_wc wait_one(Endpoint& ep, std::chrono::milliseconds timeout) {
  std::vector<ibv_wc> wcs = ep.poll(1, timeout);
  EXPECT_EQ(wcs.size(), 1u) << "no completion within " << timeout.count() << " ms";
  if (wcs.empty()) {
    ibv_wc none{};
    none.status = IBV_WC_GENERAL_ERR;
    none.wr_id = ~0ull;
    return none;
  }
  return wcs[0];
}

bool next_event(Endpoint& ep, ibv_async_event* ev, std::chrono::milliseconds timeout) {
  pollfd p{ep.context()->async_fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  if (ibv().get_async_event(ep.context(), ev) != 0) return false;
  ibv().ack_async_event(ev);
  return true;
}

const ExtraFunctions& extra() {
  static const ExtraFunctions fns = [] {
    ibv();  // loaded
    void* lib = dlopen(ZIP_VERBS_EMU_LIB, RTLD_NOW | RTLD_NOLOAD);
    ExtraFunctions f{};
    auto get = [&](const char* name, auto* slot) {
      *slot = reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(dlvsym(lib, name, "IBVERBS_1.1"));
      if (!*slot) ADD_FAILURE() << name << " is not exported at IBVERBS_1.1";
    };
    get("ibv_create_comp_channel", &f.create_comp_channel);
    get("ibv_destroy_comp_channel", &f.destroy_comp_channel);
    get("ibv_get_cq_event", &f.get_cq_event);
    get("ibv_ack_cq_events", &f.ack_cq_events);
    get("ibv_get_device_guid", &f.get_device_guid);
    dlclose(lib);  // drops only the reference NOLOAD took
    return f;
  }();
  return fns;
}

void fill_random(char* p, size_t len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < len; ++i) p[i] = static_cast<char>(rng());
}

int post_sge(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, const ibv_sge& sge,
             uint64_t remote_addr, uint32_t rkey, uint32_t imm) {
  ibv_sge s = sge;
  return post_sges(qp, op, wr_id, &s, 1, IBV_SEND_SIGNALED, remote_addr, rkey, imm);
}

Peer::Peer() {
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) != 0) return;
  if (pipe2(from, O_CLOEXEC) != 0) {
    close(to[0]);
    close(to[1]);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    execl(ZIP_VERBS_EMU_PEER, ZIP_VERBS_EMU_PEER, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  to_ = to[1];
  from_ = from[0];
  if (pid < 0) return;
  pid_ = pid;
  std::string line = read_line(10000ms);
  if (line.rfind("address ", 0) != 0 || !parse_address(line.substr(8), &address_)) {
    ADD_FAILURE() << "peer did not start: '" << line << "'";
    kill_now();
  }
}

Peer::~Peer() {
  kill_now();
  if (to_ >= 0) close(to_);
  if (from_ >= 0) close(from_);
}

void Peer::kill_now() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string Peer::call(const std::string& command, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return "";
  std::string line = command + "\n";
  if (write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
  return read_line(timeout);
}

std::string Peer::read_line(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{from_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    ssize_t n = read(from_, buf, sizeof(buf));
    if (n <= 0) return "";
    pending_.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace zipccl::verbs::emu_test
