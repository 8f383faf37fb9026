#include "sysfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace zipccl::verbs {
namespace {

std::string class_dir(const std::string& root, const std::string& dev) {
  return root + "/sys/class/infiniband/" + dev;
}

bool starts_with(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

}  // namespace

std::string ib_device_pci_path(const std::string& root, const std::string& dev, std::string* error) {
  std::string link = class_dir(root, dev) + "/device";
  char* real = realpath(link.c_str(), nullptr);
  if (!real) {
    *error = "cannot resolve " + link + ": " + std::strerror(errno);
    return "";
  }
  std::string path(real);
  std::free(real);
  return path;
}

std::string merged_pci_path(std::string path, bool merge_vfs) {
  // A BDF ends the path: DDDD:BB:dd.f; the function is the last character, the device the two
  // before the dot.
  size_t n = path.size();
  if (n < 4 || path[n - 2] != '.') return path;
  path[n - 1] = '0';
  if (merge_vfs) path[n - 3] = path[n - 4] = '0';
  return path;
}

int gid_roce_version(const std::string& root, const std::string& dev, int port, int index) {
  std::string file = class_dir(root, dev) + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                     std::to_string(index);
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[16] = {0};
  ssize_t got = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (got <= 0) return -1;
  if (starts_with(text, "IB/RoCE v1") || starts_with(text, "RoCE v1")) return 1;
  if (starts_with(text, "RoCE v2")) return 2;
  return -1;
}

}  // namespace zipccl::verbs
