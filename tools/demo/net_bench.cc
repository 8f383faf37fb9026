// zipccl-net-bench: the plugin with compression (NCCL_ZIP_ENABLE=2) against the same plugin as a
// plain transport (NCCL_ZIP_ENABLE=0), over message sizes and data kinds, on loopback. Prints one
// table row per case; any byte mismatch fails the run. --latency: round trips of one message
// instead (rank 0 sends, rank 1 echoes), then steps (both send one and receive one at once, as in
// a ring collective), median and p90, beside plain TCP doing the same on the same loopback in the
// same run (one busy-polling thread per end, as NCCL's Socket transport). --channels=N: every
// round trip or step moves one message on each of N connections at once, as a collective's step
// does over NCCL's channels.
//
//   zipccl-net-bench [--mib=N] [--latency [--iters=N] [--kib=A,B,..] [--channels=N]] [--plugin=PATH]
//                    [--version=8..11]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "args.h"
#include "exchange.h"

using namespace zipccl::demo;

namespace {

// Microseconds per round trip, then per step (Pattern), for each message size (per channel): plain
// TCP, the plugin raw (NCCL_ZIP_ENABLE=0) and auto (its own choice: small messages go raw). Any
// received byte that differs fails the run.
int latency_table(ExchangeConfig cfg, int iters, const std::vector<size_t>& sizes) {
  int failures = 0;
  if (cfg.channels > 1) printf("%d channels: one message of the size on each per round trip or step\n", cfg.channels);
  for (Pattern pattern : {Pattern::kRoundTrip, Pattern::kStep}) {
    printf("%-10s %14s %20s %20s\n", pattern == Pattern::kStep ? "step KiB" : "trip KiB", "tcp us (p90)",
           "plugin raw us (p90)", "plugin auto us (p90)");
    for (size_t bytes : sizes) {
      cfg.msg_bytes = bytes;
      const LatencyResult tcp = run_tcp_pingpong(bytes, cfg.channels, pattern, iters);
      cfg.env["NCCL_ZIP_ENABLE"] = "0";
      const LatencyResult raw = run_pingpong(cfg, pattern, iters);
      cfg.env["NCCL_ZIP_ENABLE"] = "1";
      const LatencyResult zip = run_pingpong(cfg, pattern, iters);
      if (!tcp.ok || !raw.ok || !zip.ok) {
        printf("%-10zu FAILED (%s%s%s)\n", bytes >> 10, tcp.error, raw.error, zip.error);
        ++failures;
        continue;
      }
      printf("%-10zu %7.1f (%4.0f) %12.1f (%5.0f) %12.1f (%5.0f)\n", bytes >> 10, tcp.median_us, tcp.p90_us,
             raw.median_us, raw.p90_us, zip.median_us, zip.p90_us);
      fflush(stdout);
    }
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  using zipccl::client::parse_uint;
  ExchangeConfig cfg;
  cfg.plugin = default_plugin_path();
  uint64_t mib = 64, v = 0, iters = 2000, channels = 1;
  bool latency = false;
  std::vector<size_t> sizes = {4u << 10, 16u << 10, 64u << 10, 256u << 10, 1u << 20};
  const char* usage =
      "usage: zipccl-net-bench [--mib=N] [--latency [--iters=N] [--kib=A,B,..] [--channels=N]] [--plugin=PATH]\n"
      "                        [--version=8..11]\n"
      "  --mib: MiB each way per case (1..65536, default 64)\n"
      "  --latency: round trips and steps of one message per size, plugin and plain TCP (--iters,\n"
      "             default 2000; --kib: the sizes, 1..65536 KiB each, default 4,16,64,256,1024;\n"
      "             --channels: connections each way, one message on each per step, 1..32, default 1)\n";
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    bool ok = true;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strncmp(a, "--mib=", 6)) {
      ok = parse_uint(a + 6, 1, 65536, &mib);
    } else if (!strcmp(a, "--latency")) {
      latency = true;
    } else if (!strncmp(a, "--channels=", 11)) {
      ok = parse_uint(a + 11, 1, 32, &channels);
    } else if (!strncmp(a, "--iters=", 8)) {
      ok = parse_uint(a + 8, 1, 10000000, &iters);
    } else if (!strncmp(a, "--kib=", 6)) {
      sizes.clear();
      std::string list = a + 6;
      for (size_t at = 0; ok && at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        uint64_t kib = 0;
        ok = parse_uint(list.substr(at, comma - at).c_str(), 1, 65536, &kib);
        sizes.push_back(size_t(kib) << 10);
        at = comma + 1;
      }
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
  cfg.channels = int(channels);
  const char* ifname = getenv("NCCL_SOCKET_IFNAME");
  cfg.env["NCCL_SOCKET_IFNAME"] = ifname ? ifname : "lo";
  if (latency) return latency_table(cfg, int(iters), sizes);
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
