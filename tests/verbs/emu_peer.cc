// The other process of the cross-process emulation tests: one endpoint (emu_harness) driven by
// line commands on stdin, one answer line each on stdout. It exits on EOF, on "exit", and after
// a minute whatever happens, so a failed test never leaves it behind.
#include <arpa/inet.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "emu_harness.h"

using namespace zipccl::verbs::emu_test;

namespace {

std::string describe(const std::vector<ibv_wc>& wcs) {
  std::ostringstream out;
  out << "wcs " << wcs.size();
  for (const ibv_wc& wc : wcs) {
    out << " " << wc.wr_id << ":" << wc.status << ":" << wc.opcode << ":" << wc.byte_len << ":"
        << ((wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0);
  }
  return out.str();
}

}  // namespace

int main() {
  alarm(60);
  std::string error;
  EndpointOptions options;
  auto ep = Endpoint::create(options, &error);
  if (!ep) {
    std::cout << "error " << error << std::endl;
    return 1;
  }
  std::cout << "address " << format_address(ep->address()) << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "connect") {
      Address remote;
      std::string rest;
      std::getline(in, rest);
      if (!parse_address(rest, &remote)) {
        std::cout << "error bad address" << std::endl;
        continue;
      }
      std::cout << "ok " << ep->connect(remote) << std::endl;
    } else if (cmd == "fill") {
      uint64_t seed = 0;
      size_t off = 0, len = 0;
      in >> seed >> off >> len;
      std::mt19937_64 rng(seed);
      for (size_t i = 0; i < len; ++i) ep->buffer()[off + i] = static_cast<char>(rng());
      std::cout << "ok 0" << std::endl;
    } else if (cmd == "hash") {
      size_t off = 0, len = 0;
      in >> off >> len;
      std::cout << "hash " << fnv1a(ep->buffer() + off, len) << std::endl;
    } else if (cmd == "recv") {
      int count = 0;
      size_t len = 0;
      in >> count >> len;
      int rc = 0;
      for (int i = 0; i < count && !rc; ++i) rc = ep->post_recv(i, i * len, len);
      std::cout << "ok " << rc << std::endl;
    } else if (cmd == "post") {
      int op = 0;
      uint64_t wr_id = 0, remote = 0;
      size_t off = 0, len = 0;
      uint32_t rkey = 0, imm = 0;
      in >> op >> wr_id >> off >> len >> remote >> rkey >> imm;
      std::cout << "ok "
                << ep->post(static_cast<ibv_wr_opcode>(op), wr_id, off, len, true, remote, rkey,
                            htonl(imm))
                << std::endl;
    } else if (cmd == "poll") {
      size_t n = 0;
      int ms = 0;
      in >> n >> ms;
      std::cout << describe(ep->poll(n, std::chrono::milliseconds(ms))) << std::endl;
    } else if (cmd == "exit") {
      break;
    } else {
      std::cout << "error unknown command " << cmd << std::endl;
    }
  }
  return 0;
}
