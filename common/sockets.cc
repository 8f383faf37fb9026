#include "sockets.h"

#include <initializer_list>
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "clock.h"

namespace zipccl {

socklen_t addr_len(const SockAddr& a) {
  return a.sa.sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string addr_str(const SockAddr& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &a.sin.sin_addr, host, sizeof host);
    port = ntohs(a.sin.sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (a.sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &a.sin6.sin6_addr, host, sizeof host);
    port = ntohs(a.sin6.sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "<unknown address family>";
}

namespace {

struct Spec {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
};

Spec parse_spec(std::string s) {
  Spec spec;
  if (!s.empty() && s[0] == '^') {
    spec.exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    spec.exact = true;
    s.erase(0, 1);
  }
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    if (comma > pos) spec.names.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return spec;
}

bool matches(const Spec& spec, const char* name) {
  bool hit = false;
  for (const auto& n : spec.names)
    hit |= spec.exact ? n == name : std::strncmp(name, n.c_str(), n.size()) == 0;
  return spec.exclude ? !hit : hit;
}

bool usable(const ifaddrs* ifa, int want_family) {
  if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP)) return false;
  const int fam = ifa->ifa_addr->sa_family;
  if (fam != AF_INET && fam != AF_INET6) return false;
  if (want_family != AF_UNSPEC && fam != want_family) return false;
  // Link-local IPv6 needs a scope to be reachable; NCCL skips it too.
  if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr))
    return false;
  return true;
}

std::vector<Iface> collect(const Spec& spec, int family, int max) {
  std::vector<Iface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  // Two passes so an interface's IPv4 address wins over its IPv6 one when the family is open.
  for (int pass_family : {AF_INET, AF_INET6}) {
    for (ifaddrs* ifa = list; ifa && int(out.size()) < max; ifa = ifa->ifa_next) {
      if (!usable(ifa, family) || ifa->ifa_addr->sa_family != pass_family) continue;
      if (!matches(spec, ifa->ifa_name)) continue;
      bool seen = false;
      for (const auto& i : out) seen |= i.name == ifa->ifa_name;
      if (seen) continue;
      Iface i;
      i.name = ifa->ifa_name;
      std::memset(&i.addr, 0, sizeof i.addr);
      std::memcpy(&i.addr, ifa->ifa_addr,
                  pass_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      out.push_back(i);
    }
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

std::vector<Iface> find_interfaces(const std::string& spec, const std::string& family, int max) {
  int fam = AF_UNSPEC;
  if (family == "AF_INET") fam = AF_INET;
  if (family == "AF_INET6") fam = AF_INET6;
  if (!spec.empty()) return collect(parse_spec(spec), fam, max);
  for (const char* s : {"^docker,lo,virbr", "docker", "lo"}) {
    auto v = collect(parse_spec(s), fam, max);
    if (!v.empty()) return v;
  }
  return {};
}

bool set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

bool set_conn_options(int fd, int timeout_ms) {
  int one = 1;
  if (!set_nonblocking(fd)) return false;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return false;
  if (timeout_ms > 0) {
    // A killed peer resets the connection at once; these bound the silent cases (host gone,
    // cable pulled): unacknowledged data fails after timeout_ms, an idle link is probed.
    unsigned int t = unsigned(timeout_ms);
    int idle = timeout_ms / 3000 > 0 ? timeout_ms / 3000 : 1, intvl = idle, cnt = 3;
    if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &t, sizeof t) != 0) return false;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0) return false;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  }
  return true;
}

namespace {
bool transient(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }
}  // namespace

Io send_some(int fd, const void* buf, size_t len, size_t* off) {
  while (*off < len) {
    ssize_t r = ::send(fd, static_cast<const char*>(buf) + *off, len - *off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      *off += size_t(r);
      continue;
    }
    if (r < 0 && transient(errno)) return Io::kAgain;
    return r < 0 && errno != EPIPE && errno != ECONNRESET ? Io::kError : Io::kClosed;
  }
  return Io::kDone;
}

Io recv_some(int fd, void* buf, size_t len, size_t* off) {
  while (*off < len) {
    ssize_t r = ::recv(fd, static_cast<char*>(buf) + *off, len - *off, MSG_DONTWAIT);
    if (r > 0) {
      *off += size_t(r);
      continue;
    }
    if (r < 0 && transient(errno)) return Io::kAgain;
    return r < 0 && errno != ECONNRESET ? Io::kError : Io::kClosed;
  }
  return Io::kDone;
}

size_t close_delivered(int fd, int64_t quiet_ms) {
  int domain = 0;
  socklen_t len = sizeof domain;
  int left = 0;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && (domain == AF_INET || domain == AF_INET6) &&
      shutdown(fd, SHUT_WR) == 0) {
    char sink[4096];
    bool open = true;  // the peer may still send: read it, or the close resets
    int64_t since = now_ms();
    int last = -1;
    while (ioctl(fd, SIOCOUTQ, &left) == 0 && left > 0) {  // unacknowledged bytes, the FIN's one included
      tcp_info ti{};
      socklen_t tl = sizeof ti;
      if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_state == TCP_CLOSE) {
        left = 0;  // reset: the peer closed its end and wants nothing more
        break;
      }
      if (left != last) {
        last = left;
        since = now_ms();
      } else if (now_ms() - since > quiet_ms) {
        break;
      }
      pollfd p{fd, short(open ? POLLIN : 0), 0};
      if (open && poll(&p, 1, 1) > 0) {
        ssize_t r;
        while ((r = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
        }
        open = r != 0;  // at 0 the peer is done sending, not necessarily reading
      } else if (!open) {
        usleep(1000);
      }
    }
  }
  close(fd);
  return size_t(left > 0 ? left : 0);
}

}  // namespace zipccl
