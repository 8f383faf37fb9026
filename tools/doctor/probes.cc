#include "probes.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>

#include "exchange.h"

namespace zipccl::doctor {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

std::string real_path(const std::string& p) {
  char buf[4096];
  return realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

// The file a handle from dlopen was loaded from.
std::string loaded_path(void* h) {
  link_map* m = nullptr;
  return h && dlinfo(h, RTLD_DI_LINKMAP, &m) == 0 && m ? real_path(m->l_name) : std::string();
}

}  // namespace

int probe_nccl(Report* r) {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  std::string how = "the dynamic linker's search";
  for (const char* p : {"/usr/local/cuda/lib64/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}) {
    if (h) break;
    if ((h = dlopen(p, RTLD_NOW | RTLD_LOCAL))) how = "outside the linker's search: put its folder in LD_LIBRARY_PATH";
  }
  if (!h) {
    r->add("nccl", Level::kWarn, "no libnccl.so.2 found (PyTorch wheels bring their own: check the job's environment)");
    return 0;
  }
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(dlsym(h, "ncclGetVersion"));
  int v = 0;
  if (!get || get(&v) != 0) {
    r->add("nccl", Level::kFail, loaded_path(h) + ": ncclGetVersion failed");
    return 0;
  }
  const int major = v / 10000, minor = v / 100 % 100, patch = v % 100;
  // The newest net table each NCCL asks for (nccl-plugin-facts: 2.20-2.23 v8, 2.24-2.25 v9,
  // 2.26-2.27 v10, 2.28-2.29 v11, 2.30 v12, which falls back to older tables).
  const int abi = major > 2 || minor >= 30 ? 12 : minor >= 28 ? 11 : minor >= 26 ? 10 : minor >= 24 ? 9 : minor >= 20 ? 8 : 0;
  const std::string where = loaded_path(h) + " (" + how + "): NCCL " + std::to_string(major) + "." +
                            std::to_string(minor) + "." + std::to_string(patch);
  if (abi == 0) {
    r->add("nccl", Level::kFail, where + ": older than 2.20, which no plugin table of ours serves (ncclNet v8-v11)");
  } else if (abi == 12) {
    r->add("nccl", Level::kOk, where + ": asks for ncclNet v12 first; the plugin serves v11, which it takes next");
    return 11;
  } else {
    r->add("nccl", Level::kOk, where + ": loads the plugin's ncclNet v" + std::to_string(abi) + " table");
  }
  return abi;
}

std::string probe_plugin(Report* r, int abi) {
  const char* env = getenv("NCCL_NET_PLUGIN");
  std::string name = env ? env : "";
  if (name.empty()) {
    r->add("plugin", Level::kWarn,
           "NCCL_NET_PLUGIN is unset: NCCL then loads libnccl-net.so (configure with -DZIPCCL_NCCL_NET_LINK=ON "
           "to install that name) or set NCCL_NET_PLUGIN=zip");
    name = "libnccl-net.so";
  } else if (name.find('/') == std::string::npos && name.find(".so") == std::string::npos) {
    name = "libnccl-net-" + name + ".so";  // NCCL's expansion of a short name
  }
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    r->add("plugin", Level::kFail, "NCCL would not find the plugin: dlopen(" + name + "): " + dlerror() +
                                       " (put its folder in LD_LIBRARY_PATH)");
    return "";
  }
  const std::string path = loaded_path(h);
  const bool ours = dlsym(h, "ncclNetPlugin_v11") && dlsym(h, "ncclNetPlugin_v8");
  if (!ours) {
    r->add("plugin", Level::kWarn, path + " is not zipccl's (no ncclNetPlugin_v8..v11 tables)");
    return "";
  }
  const std::string sym = "ncclNetPlugin_v" + std::to_string(abi);
  if (abi && !dlsym(h, sym.c_str()))
    r->add("plugin", Level::kFail, path + " lacks " + sym + ", the table this NCCL asks for");
  else
    r->add("plugin", Level::kOk, path + (abi ? " exports " + sym : std::string(" (NCCL's version unknown)")));
  return path;
}

std::vector<Nic> probe_rdma(Report* r) {
  std::vector<Nic> nics;
  const std::string root = "/sys/class/infiniband";
  const auto devs = list_dir(root);
  const bool verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL) != nullptr;
  if (devs.empty()) {
    r->add("rdma", Level::kInfo, "no RDMA devices: the plugin uses TCP sockets (NCCL_SOCKET_IFNAME picks the interface)");
    return nics;
  }
  if (!verbs)
    r->add("rdma", Level::kFail, "RDMA devices present but libibverbs.so.1 does not load: install rdma-core "
                                 "(libibverbs1, ibverbs-providers); the plugin falls back to sockets");
  int active = 0;
  for (const auto& d : devs) {
    Nic n{d, real_path(root + "/" + d + "/device")};
    nics.push_back(n);
    for (const auto& p : list_dir(root + "/" + d + "/ports")) {
      const std::string base = root + "/" + d + "/ports/" + p;
      const std::string state = read_line(base + "/state"), layer = read_line(base + "/link_layer"),
                        rate = read_line(base + "/rate");
      int gids = 0;
      for (const auto& g : list_dir(base + "/gids"))
        if (read_line(base + "/gids/" + g).find_first_not_of("0:") != std::string::npos) ++gids;
      const bool up = state.find("ACTIVE") != std::string::npos;
      active += up;
      std::string text = d + " port " + p + ": " + state + ", " + layer + ", " + rate;
      if (layer == "Ethernet") text += ", " + std::to_string(gids) + " non-zero GIDs" + (gids ? "" : " (RoCE needs one)");
      r->add("rdma", up && (layer != "Ethernet" || gids) ? Level::kOk : Level::kWarn, text);
    }
  }
  if (!active) r->add("rdma", Level::kFail, "no ACTIVE RDMA port: the plugin falls back to sockets");
  return nics;
}

void probe_peermem(Report* r, bool any_nic) {
  const bool peermem = access("/sys/module/nvidia_peermem", F_OK) == 0 ||
                       access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0;
  if (peermem)
    r->add("gdr", Level::kOk, "nvidia-peermem loaded: GPUDirect RDMA by pointer (NCCL_PTR_CUDA)");
  else
    r->add("gdr", any_nic ? Level::kWarn : Level::kInfo,
           "nvidia-peermem not loaded (modprobe nvidia-peermem); GPUDirect RDMA only where DMA-BUF works, "
           "else NCCL stages GPU data through host memory");
}

void probe_distances(Report* r, const std::vector<Gpu>& gpus, const std::vector<Nic>& nics) {
  for (const auto& g : gpus)
    for (const auto& n : nics) {
      if (g.pci_path.empty() || n.pci_path.empty()) continue;
      // Common ancestors in the PCI tree: /sys/devices/pciDDDD:BB/<bridge>/<bridge>/<function>.
      auto parts = [](const std::string& p) {
        std::vector<std::string> v;
        size_t i = 0;
        while ((i = p.find('/', i)) != std::string::npos) v.push_back(p.substr(0, i++));
        v.push_back(p);
        return v;
      };
      const auto a = parts(g.pci_path), b = parts(n.pci_path);
      size_t common = 0;
      while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
      const bool same_root = common >= 4;  // /sys/devices/pciDDDD:BB shared
      const size_t below = common > 4 ? common - 4 : 0;  // bridges shared below the root port
      const char* kind = !same_root ? "SYS (another CPU root complex)" : below >= 2 ? "PIX (one PCIe switch)"
                         : below == 1 ? "PXB (PCIe switches)" : "PHB (through the CPU)";
      const bool gdr = same_root && below >= 1;
      r->add("topology", gdr ? Level::kOk : Level::kInfo,
             "GPU " + std::to_string(g.index) + " - " + n.name + ": " + kind +
                 (gdr ? ": within NCCL_NET_GDR_LEVEL's default (PXB)" : ": beyond NCCL_NET_GDR_LEVEL's default (PXB): "
                                                                     "no GPUDirect RDMA unless raised"));
    }
}

void probe_loopback(Report* r, const std::string& plugin) {
  if (plugin.empty()) {
    r->add("loopback", Level::kWarn, "not run: no plugin found");
    return;
  }
  demo::ExchangeConfig cfg;
  cfg.plugin = plugin;
  cfg.bytes = 8u << 20;
  cfg.msg_bytes = 256u << 10;
  cfg.env["NCCL_SOCKET_IFNAME"] = "lo";
  cfg.env["NCCL_ZIP_TRANSPORT"] = "socket";
  for (const char* zip : {"0", "2"}) {
    cfg.env["NCCL_ZIP_ENABLE"] = zip;
    const demo::ExchangeResult x = demo::run_exchange(cfg);
    const std::string what = std::string("two ranks over lo through the plugin, compression ") +
                             (zip[0] == '0' ? "off" : "always");
    if (!x.ok())
      r->add("loopback", Level::kFail, what + ": " + x.rank[0].error + " " + x.rank[1].error);
    else if (!x.bit_exact())
      r->add("loopback", Level::kFail, what + ": bytes differ");
    else {
      char b[160];
      std::snprintf(b, sizeof b, ": every byte exact, %.2f GB/s per direction, wire ratio %.3f", x.gbps(), x.ratio());
      r->add("loopback", Level::kOk, what + b);
    }
  }
}

}  // namespace zipccl::doctor
