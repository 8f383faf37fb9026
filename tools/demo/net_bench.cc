// zipccl-net-bench: the plugin with compression (NCCL_ZIP_ENABLE=2) against the same plugin as a
// plain transport (NCCL_ZIP_ENABLE=0), over message sizes and data kinds, on loopback. Prints one
// table row per case; any byte mismatch fails the run.
//
//   zipccl-net-bench [--mib=N] [--plugin=PATH] [--version=8..11]
#include <initializer_list>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "args.h"
#include "exchange.h"

using namespace zipccl::demo;

int main(int argc, char** argv) {
  using zipccl::client::parse_uint;
  ExchangeConfig cfg;
  cfg.plugin = default_plugin_path();
  uint64_t mib = 64, v = 0;
  const char* usage =
      "usage: zipccl-net-bench [--mib=N] [--plugin=PATH] [--version=8..11]\n"
      "  --mib: MiB each way per case (1..65536, default 64)\n";
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    bool ok = true;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strncmp(a, "--mib=", 6)) {
      ok = parse_uint(a + 6, 1, 65536, &mib);
    } else if (!strncmp(a, "--plugin=", 9)) {
      cfg.plugin = a + 9;
    } else if (!strncmp(a, "--version=", 10)) {
      ok = parse_uint(a + 10, 8, 11, &v);
      cfg.version = int(v);
    } else {
      ok = false;
    }
    if (!ok) {
      fprintf(stderr, "zipccl-net-bench: bad argument %s\n%s", a, usage);
      return 2;
    }
  }
  cfg.bytes = mib << 20;
  const char* ifname = getenv("NCCL_SOCKET_IFNAME");
  cfg.env["NCCL_SOCKET_IFNAME"] = ifname ? ifname : "lo";
  printf("%-7s %9s %12s %12s %8s %8s\n", "data", "msg KiB", "raw GB/s", "zip GB/s", "speedup", "ratio");
  int failures = 0;
  for (const char* kind : {"bf16", "fp32", "random"}) {
    for (size_t kib : {64, 512, 4096}) {
      zipccl::client::parse_kind(kind, &cfg.kind);
      cfg.msg_bytes = kib << 10;
      cfg.env["NCCL_ZIP_ENABLE"] = "0";
      ExchangeResult raw = run_exchange(cfg);
      cfg.env["NCCL_ZIP_ENABLE"] = "2";
      ExchangeResult zip = run_exchange(cfg);
      if (!raw.bit_exact() || !zip.bit_exact()) {
        printf("%-7s %9zu FAILED (%s%s%s%s)\n", kind, kib, raw.rank[0].error, raw.rank[1].error, zip.rank[0].error,
               zip.rank[1].error);
        ++failures;
        continue;
      }
      printf("%-7s %9zu %12.3f %12.3f %8.2f %8.3f\n", kind, kib, raw.gbps(), zip.gbps(),
             raw.gbps() > 0 ? zip.gbps() / raw.gbps() : 0, zip.ratio());
      fflush(stdout);
    }
  }
  return failures ? 1 : 0;
}
