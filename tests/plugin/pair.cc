#include "pair.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "spelled_wire.h"

namespace zipccl::test {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

long field(const std::string& line, const std::string& key) {
  size_t p = line.find(" " + key + "=");
  return p == std::string::npos ? -999 : atol(line.c_str() + p + key.size() + 2);
}

HandleInfo handle_info(const unsigned char* handle) {
  wire::HandleHead head;
  std::memcpy(&head, handle, sizeof head);
  HandleInfo h;
  std::memcpy(&h.addr, head.addr, sizeof h.addr);
  h.nonce = head.nonce;
  return h;
}

std::string handle_hex(const unsigned char* handle, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    char h[3];
    snprintf(h, sizeof h, "%02x", handle[i]);
    s += h;
  }
  return s;
}

std::vector<unsigned char> handle_bytes(const std::string& hex) {
  std::vector<unsigned char> b(hex.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = (unsigned char)std::stoi(hex.substr(2 * i, 2), nullptr, 16);
  return b;
}

bool ib_run() {
  const char* t = getenv("NCCL_ZIP_TRANSPORT");
  return t && std::string(t) == "ib";
}

std::string result_line(const Proc& p) {
  for (const auto& l : p.lines())
    if (l.rfind("RESULT", 0) == 0) return l;
  return "";
}

static std::string summary_lines(const Proc& p) {
  std::string s;
  for (const auto& l : p.lines())
    if (l.rfind("SUMMARY ", 0) == 0) s += l.substr(8) + "\n";
  return s;
}

Env base_env(const std::string& zip) {
  return Env{{"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_ZIP_ENABLE", zip}};
}

std::vector<std::string> peer_args(const std::string& role, int version, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {ZIP_PEER_PATH, role, std::string("--plugin=") + ZIP_PLUGIN_PATH,
                                "--version=" + std::to_string(version)};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

Pair run_pair(int version, const Env& env, const std::vector<std::string>& recv_extra,
              const std::vector<std::string>& send_extra, double timeout_s,
              const std::function<void(const std::string&)>& between) {
  Pair r;
  Proc recv(peer_args("recv", version, recv_extra), env);
  std::string h = recv.read_line(30);
  EXPECT_EQ(h.rfind("HANDLE ", 0), 0u) << "receiver printed: " << h;
  if (h.rfind("HANDLE ", 0) != 0) return r;
  if (between) between(h.substr(7));
  auto send_args = send_extra;
  send_args.push_back("--handle=" + h.substr(7));
  Proc send(peer_args("send", version, send_args), env);
  const double end = now_s() + timeout_s;
  while (now_s() < end && !(recv.exited() && send.exited())) {
    if (recv.exited() && r.recv_exit_s == 0) r.recv_exit_s = now_s();
    if (send.exited() && r.send_exit_s == 0) r.send_exit_s = now_s();
    usleep(2000);
  }
  if (r.recv_exit_s == 0 && recv.exited()) r.recv_exit_s = now_s();
  if (r.send_exit_s == 0 && send.exited()) r.send_exit_s = now_s();
  r.recv_rc = recv.wait(1);
  r.send_rc = send.wait(1);
  r.recv_result = result_line(recv);
  r.send_result = result_line(send);
  r.recv_summary = summary_lines(recv);
  r.send_summary = summary_lines(send);
  return r;
}

void expect_ok(const Pair& p) {
  EXPECT_EQ(p.recv_rc, 0) << p.recv_result;
  EXPECT_EQ(p.send_rc, 0) << p.send_result;
  EXPECT_EQ(field(p.recv_result, "ok"), 1) << p.recv_result;
  EXPECT_EQ(field(p.send_result, "ok"), 1) << p.send_result;
}

std::string probe(const Env& env, std::vector<std::string>* log) {
  Proc p(peer_args("probe", 11, {}), env);
  p.wait(30);
  if (log) *log = p.lines();
  return result_line(p);
}

}  // namespace zipccl::test
