#include "spawn.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace zipccl::test {
namespace {
double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Proc::Proc(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  int p[2];
  if (pipe(p) != 0) abort();
  pid_ = fork();
  if (pid_ == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    for (const auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(p[1]);
  out_fd_ = p[0];
}

Proc::~Proc() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
}

std::string Proc::read_line(double timeout_s) {
  const double end = now_s() + timeout_s;
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string l = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      lines_.push_back(l);
      return l;
    }
    const double left = end - now_s();
    if (left <= 0) return "";
    pollfd pfd{out_fd_, POLLIN, 0};
    if (poll(&pfd, 1, int(left * 1000) + 1) <= 0) continue;
    char tmp[4096];
    ssize_t r = read(out_fd_, tmp, sizeof tmp);
    if (r <= 0) return "";
    buf_.append(tmp, size_t(r));
  }
}

bool Proc::exited() {
  if (reaped_) return true;
  if (waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return reaped_;
}

int Proc::wait(double timeout_s) {
  const double end = now_s() + timeout_s;
  while (!exited()) {
    if (now_s() > end) return -1;
    usleep(2000);
  }
  // Drain the rest of stdout.
  while (!read_line(0.05).empty()) {
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  return 128 + WTERMSIG(status_);
}

}  // namespace zipccl::test
