#include "identity.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace zipccl::verbs::emu {
namespace {

constexpr uint16_t kMaxLid = 0xBFFF;  // 0xC000 and up are multicast LIDs

// Abstract names (leading NUL): nothing on the filesystem to clean up after a crash.
socklen_t lid_address(uint16_t lid, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  int n = std::snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "zipccl-verbs-emu.lid.%u",
                        static_cast<unsigned>(lid));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

uint64_t random_node_id() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
    v = static_cast<uint64_t>(getpid()) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(time(nullptr));
  }
  v &= 0xFFFFFFFFFFFFull;
  return v ? v : 1;
}

}  // namespace

uint64_t node_id() {
  static const uint64_t id = random_node_id();
  return id;
}

int bind_lid_socket(uint16_t* lid, std::string* error) {
  uint32_t start = static_cast<uint32_t>(getpid()) * 2654435761u % kMaxLid;
  for (uint32_t i = 0; i < kMaxLid; ++i) {
    uint16_t candidate = static_cast<uint16_t>((start + i) % kMaxLid + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::string("socket: ") + std::strerror(errno);
      return -1;
    }
    sockaddr_un addr;
    socklen_t len = lid_address(candidate, &addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      if (listen(fd, 128) != 0) {
        *error = std::string("listen: ") + std::strerror(errno);
        close(fd);
        return -1;
      }
      *lid = candidate;
      return fd;
    }
    int err = errno;
    close(fd);
    if (err != EADDRINUSE) {
      *error = std::string("bind: ") + std::strerror(err);
      return -1;
    }
  }
  *error = "every LID is taken";
  return -1;
}

int connect_lid(uint16_t lid) {
  if (lid == 0 || lid > kMaxLid) return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr;
  socklen_t len = lid_address(lid, &addr);
  // A unix stream connect completes at once or fails (EAGAIN: backlog full, dropped like a
  // lost packet and retried by the requester).
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

uint64_t port_guid(uint16_t lid) { return node_id() << 16 | lid; }

ibv_gid link_local_gid(uint16_t lid) {
  ibv_gid gid{};
  gid.raw[0] = 0xfe;
  gid.raw[1] = 0x80;
  uint64_t guid = port_guid(lid);
  for (int i = 0; i < 8; ++i) gid.raw[8 + i] = static_cast<uint8_t>(guid >> (56 - 8 * i));
  return gid;
}

ibv_gid ipv4_mapped_gid(uint16_t lid) {
  ibv_gid gid{};
  gid.raw[10] = 0xff;
  gid.raw[11] = 0xff;
  gid.raw[12] = 10;
  gid.raw[13] = static_cast<uint8_t>(lid >> 8);
  gid.raw[14] = static_cast<uint8_t>(lid);
  gid.raw[15] = 1;
  return gid;
}

bool route_from_gid(const ibv_gid& gid, Route* route) {
  static const uint8_t kLinkLocal[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
  static const uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid.raw, kLinkLocal, 8) == 0) {
    uint64_t guid = 0;
    for (int i = 0; i < 8; ++i) guid = guid << 8 | gid.raw[8 + i];
    route->lid = static_cast<uint16_t>(guid);
    route->node = guid >> 16;
  } else if (std::memcmp(gid.raw, kV4Mapped, 12) == 0 && gid.raw[12] == 10 && gid.raw[15] == 1) {
    route->lid = static_cast<uint16_t>(gid.raw[13] << 8 | gid.raw[14]);
    route->node = 0;
  } else {
    return false;
  }
  return route->lid != 0 && route->lid <= kMaxLid;
}

}  // namespace zipccl::verbs::emu
