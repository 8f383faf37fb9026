// What the verbs transport reads from sysfs about an IB device, against a root directory so
// tests can build a fake tree ("" or "/" for the real one).
#pragma once

#include <string>

namespace zipccl::verbs {

// The real PCI device directory of IB device `dev`: realpath of
// <root>/sys/class/infiniband/<dev>/device. NCCL places the NIC in its topology by this path
// (and enables GPUDirect only when it is a real PCI path near the GPU). Empty when it cannot be
// resolved, with the reason in *error.
std::string ib_device_pci_path(const std::string& root, const std::string& dev, std::string* error);

// The path NCCL reports for a device: function forced to 0 so the ports of a multi-port NIC
// share one PCI device, and with merge_vfs (NCCL_IB_MERGE_VFS, default 1) the device number
// forced to 00 so virtual functions join their physical function. "…/0000:17:01.3" ->
// "…/0000:17:00.0". A path that does not end in a BDF is returned unchanged.
std::string merged_pci_path(std::string path, bool merge_vfs);

// RoCE version of GID `index` of dev:port from
// <root>/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>: 1 for "IB/RoCE v1"
// or "RoCE v1", 2 for "RoCE v2", -1 when the file is missing, unreadable (containers map only
// some indices: EINVAL) or says something else.
int gid_roce_version(const std::string& root, const std::string& dev, int port, int index);

}  // namespace zipccl::verbs
