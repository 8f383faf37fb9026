// zipccl-doctor: run on a node, it says what a job there would meet and what is wrong: the NCCL
// library and the plugin table it loads, the plugin NCCL would find, RDMA devices and ports,
// GPUDirect RDMA, GPUs and their PCI distance to each NIC, the GPU codec's self-test on each
// GPU, and two ranks through the plugin over loopback. Exit status 1 when anything failed.
//
//   zipccl-doctor [--json]
#include <cstdio>
#include <cstring>

#include "exchange.h"
#include "probes.h"

using namespace zipccl::doctor;

int main(int argc, char** argv) {
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) {
      json = true;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      std::puts("usage: zipccl-doctor [--json]\n"
                "  checks NCCL, the plugin NCCL would load (NCCL_NET_PLUGIN, LD_LIBRARY_PATH), RDMA, GPUDirect\n"
                "  RDMA, GPUs and their distance to the NICs, the GPU codec, a loopback transfer; exit 1 on problems");
      return 0;
    } else {
      std::fprintf(stderr, "zipccl-doctor: bad argument %s (see --help)\n", argv[i]);
      return 2;
    }
  }
  Report r;
  const int abi = probe_nccl(&r);
  std::string plugin = probe_plugin(&r, abi);
  const auto nics = probe_rdma(&r);
  probe_peermem(&r, !nics.empty());
  const auto gpus = probe_gpus(&r);
  probe_distances(&r, gpus, nics);
  // The loopback run uses the plugin NCCL would load, else the one installed beside this tool.
  if (plugin.empty()) {
    plugin = zipccl::demo::default_plugin_path();
    r.add("loopback", Level::kInfo, "using " + plugin);
  }
  probe_loopback(&r, plugin);
  if (json)
    r.print_json();
  else
    r.print_text();
  return r.failed() ? 1 : 0;
}
