// Shared memory with a file descriptor (memfd_create, mapped in this process): where the GPU is
// emulated (NCCL_ZIP_GPU_EMULATE, the drivers' --emulated-device) it plays device memory, and the
// fd its DMA-BUF for the emulated HCA, which reaches the memory through this mapping.
#pragma once

#include <cstddef>
#include <string>

namespace zipccl {

class MappedMemfd {
 public:
  // Creates and maps max(bytes, 1) bytes, zeroed; on failure ok() is false and error() says why.
  MappedMemfd(const char* name, size_t bytes);
  ~MappedMemfd();
  MappedMemfd(const MappedMemfd&) = delete;
  MappedMemfd& operator=(const MappedMemfd&) = delete;

  bool ok() const { return data_ != nullptr; }
  const std::string& error() const { return error_; }
  char* data() const { return data_; }
  size_t size() const { return bytes_; }
  // The fd, which this object closes at its end unless release_fd() took it.
  int fd() const { return fd_; }
  // Hands the fd to the caller (who closes it); the mapping stays this object's.
  int release_fd();

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
  int fd_ = -1;
  std::string error_;
};

}  // namespace zipccl
