// Out of file descriptors: a listener that cannot accept and a helper thread without its wake-up
// descriptor become ncclSystemError, not a busy loop or a silent slowdown. Each case runs in a
// child process whose descriptor limit is lowered to 0 (no new descriptor), so the test process
// keeps its own.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "socket_worker.h"
#include "tcp_bootstrap.h"

namespace zipccl::tcp {
namespace {

// Runs f in a child with no descriptors to spare; the child's exit status is f's result.
int in_child_without_fds(const std::function<int()>& f) {
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = 0;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(99);
    _exit(f());
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

TEST(Exhaustion, ListenerThatCannotAcceptFails) {
  SockAddr a{};
  a.sin.sin_family = AF_INET;
  a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int lfd = listen_socket(&a);
  ASSERT_GE(lfd, 0);
  HelloListener hl(lfd, 8, "test");
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c, &a.sa, addr_len(a)), 0);  // waits in the accept queue
  const int rc = in_child_without_fds([&] {
    const ncclResult_t r = hl.poll([](int, const SockAddr&, const char*) { return static_cast<const char*>(nullptr); });
    return r == ncclSystemError ? 0 : 1;
  });
  EXPECT_EQ(rc, 0) << "accept() with no descriptor left must fail the listener, not report 'not ready' forever";
  close(c);
}

TEST(Exhaustion, HelperThreadWithoutWakeupFailsTheLink) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const int rc = in_child_without_fds([&] {
    StickyError err;
    SocketWorker w({sv[0]}, &err, "test", nullptr);
    if (err.code() != ncclSystemError) return 1;
    return err.text().find("eventfd") != std::string::npos ? 0 : 2;
  });
  EXPECT_EQ(rc, 0) << "a worker that cannot create its eventfd must set the link's error";
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace zipccl::tcp
