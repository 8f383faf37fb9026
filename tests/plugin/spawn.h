// Runs zip_peer processes for the tests: environment per process, stdout captured line by line,
// a deadline on everything.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace zipccl::test {

class Proc {
 public:
  Proc(const std::vector<std::string>& args, const std::map<std::string, std::string>& env);
  ~Proc();  // kills the process if it is still running
  // Next stdout line, or "" at EOF / after timeout_s.
  std::string read_line(double timeout_s);
  // Waits for exit; returns the exit code, 128+signal if killed, -1 on timeout.
  int wait(double timeout_s);
  bool exited() ;
  pid_t pid() const { return pid_; }
  // Every stdout line read so far.
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  std::string buf_;
  std::vector<std::string> lines_;
};

}  // namespace zipccl::test
