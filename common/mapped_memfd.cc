#include "mapped_memfd.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace zipccl {

MappedMemfd::MappedMemfd(const char* name, size_t bytes) : bytes_(bytes ? bytes : 1) {
  fd_ = int(memfd_create(name, MFD_CLOEXEC));
  if (fd_ < 0 || ftruncate(fd_, off_t(bytes_)) != 0) {
    error_ = std::string(fd_ < 0 ? "memfd_create: " : "ftruncate: ") + std::strerror(errno);
    return;
  }
  void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED) {
    error_ = std::string("mmap: ") + std::strerror(errno);
    return;
  }
  data_ = static_cast<char*>(m);
}

MappedMemfd::~MappedMemfd() {
  if (data_) munmap(data_, bytes_);
  if (fd_ >= 0) close(fd_);
}

int MappedMemfd::release_fd() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace zipccl
