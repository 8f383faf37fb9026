#include "wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace zipccl::verbs::emu {
namespace {

// Far above any message the emulation sends (a message is at most max_msg_sz, 2 GiB), so a
// corrupt length is caught instead of allocated.
constexpr uint64_t kMaxPayload = 1ull << 31;

}  // namespace

Conn::~Conn() { close(fd_); }

char* Conn::reserve(const Header& h) {
  std::vector<char> msg(sizeof(Header) + h.payload);
  std::memcpy(msg.data(), &h, sizeof(Header));
  queued_ += msg.size();
  out_.push_back(std::move(msg));
  return out_.back().data() + sizeof(Header);
}

void Conn::unreserve() {
  queued_ -= out_.back().size();
  out_.pop_back();
}

void Conn::queue(const Header& h, const void* payload) {
  char* dst = reserve(h);
  if (h.payload) std::memcpy(dst, payload, h.payload);
}

void Conn::flush() {
  while (!broken_ && !out_.empty()) {
    std::vector<char>& msg = out_.front();
    ssize_t n = send(fd_, msg.data() + out_offset_, msg.size() - out_offset_,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      broken_ = true;
      break;
    }
    out_offset_ += static_cast<size_t>(n);
    queued_ -= static_cast<size_t>(n);
    if (out_offset_ == msg.size()) {
      out_.pop_front();
      out_offset_ = 0;
    }
  }
  if (broken_) {
    out_.clear();
    queued_ = 0;
  }
}

void Conn::receive(const std::function<void(const Header&, const char*)>& fn) {
  for (;;) {
    if (in_.size() - in_used_ < 65536) in_.resize(in_used_ + 65536 * 4);
    ssize_t n = recv(fd_, in_.data() + in_used_, in_.size() - in_used_, MSG_DONTWAIT);
    if (n == 0) {
      broken_ = true;
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) broken_ = true;
      return;
    }
    in_used_ += static_cast<size_t>(n);
    size_t pos = 0;
    while (in_used_ - pos >= sizeof(Header)) {
      Header h;
      std::memcpy(&h, in_.data() + pos, sizeof(h));
      if (h.magic != kMagic || h.payload > kMaxPayload) {
        broken_ = true;
        return;
      }
      if (in_used_ - pos < sizeof(Header) + h.payload) {
        // Grow once to the whole message instead of by 256 KiB steps.
        size_t need = pos + sizeof(Header) + h.payload;
        if (in_.size() < need) in_.resize(need);
        break;
      }
      fn(h, in_.data() + pos + sizeof(Header));
      pos += sizeof(Header) + h.payload;
    }
    if (pos) {
      std::memmove(in_.data(), in_.data() + pos, in_used_ - pos);
      in_used_ -= pos;
    }
  }
}

}  // namespace zipccl::verbs::emu
