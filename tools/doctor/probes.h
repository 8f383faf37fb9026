// What zipccl-doctor looks at on the node. Each probe adds its findings to the report.
#pragma once

#include <string>
#include <vector>

#include "report.h"

namespace zipccl::doctor {

// The NCCL library a job would load (the dynamic linker's search, then CUDA's folder), its
// version and the net plugin ABI it asks for (0 when no NCCL was found).
int probe_nccl(Report* r);
// The plugin NCCL would load for NCCL_NET_PLUGIN, and whether it exports the ABI NCCL asks for.
// Its path, or empty.
std::string probe_plugin(Report* r, int abi);

struct Nic {
  std::string name;      // mlx5_0
  std::string pci_path;  // sysfs path of its PCI function, or empty
};
// RDMA devices and ports from sysfs: state, link layer, rate, GIDs; libibverbs present.
std::vector<Nic> probe_rdma(Report* r);
// GPUDirect RDMA's kernel side: nvidia-peermem.
void probe_peermem(Report* r, bool any_nic);

struct Gpu {
  int index;
  std::string name;
  std::string pci_path;  // sysfs path of its PCI function, or empty
};
// How NCCL would rate the path between each GPU and each NIC (PIX, PXB, PHB, SYS), and what
// NCCL_NET_GDR_LEVEL's default (PXB) makes of it.
void probe_distances(Report* r, const std::vector<Gpu>& gpus, const std::vector<Nic>& nics);

// GPUs (CUDA), and the GPU codec's self-test on each: a batch encoded and decoded on the device,
// byte-identical to the CPU codec. Builds without CUDA report that instead.
std::vector<Gpu> probe_gpus(Report* r);

// Two ranks through the plugin over loopback, every byte checked.
void probe_loopback(Report* r, const std::string& plugin);

}  // namespace zipccl::doctor
