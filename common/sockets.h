// Socket plumbing for the socket transport: addresses, interface selection the way NCCL's own
// socket code does it (NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY), socket options.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zipccl {

union SockAddr {
  sockaddr sa;
  sockaddr_in sin;
  sockaddr_in6 sin6;
};

socklen_t addr_len(const SockAddr& a);
std::string addr_str(const SockAddr& a);

struct Iface {
  std::string name;
  SockAddr addr;
};

// Interfaces matching spec, one address each. spec: comma-separated name prefixes; "^" in front
// excludes them, "=" makes them exact names. Empty spec: anything but docker*, lo*, virbr*, then
// docker*, then lo*. family: "AF_INET", "AF_INET6" or "" (any; IPv4 preferred per interface).
std::vector<Iface> find_interfaces(const std::string& spec, const std::string& family, int max);

// Options for every connection socket: non-blocking, no Nagle, and a bound on how long the
// kernel keeps unacknowledged data or a silent peer before failing the socket (timeout_ms 0: off).
bool set_conn_options(int fd, int timeout_ms);
bool set_nonblocking(int fd);

// Moves the rest of buf[*off, len) over a non-blocking socket without blocking. kClosed: the peer
// closed (or reset) the connection; kError: any other failure, errno set.
enum class Io { kDone, kAgain, kClosed, kError };
Io send_some(int fd, const void* buf, size_t len, size_t* off);
Io recv_some(int fd, void* buf, size_t len, size_t* off);

// Closes a connected TCP socket once the peer's kernel has acknowledged every byte written to it
// (and the FIN after them), reading and dropping whatever the peer still sends meanwhile: close()
// with unread bytes, or bytes arriving after it, resets the connection, and a reset throws away
// what the kernel still held for the peer. Gives up after quiet_ms in which the peer took nothing.
// Returns the bytes it gave up on (0: all delivered, or the peer reset the connection, closed
// itself). Other sockets are closed at once.
size_t close_delivered(int fd, int64_t quiet_ms);

}  // namespace zipccl
