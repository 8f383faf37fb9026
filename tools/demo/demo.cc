// zipccl-demo: the project in one command. Builds nothing itself; runs a two-rank exchange
// through the real libnccl-net-zip.so over loopback with compression off (the plugin as a plain
// transport: the baseline), auto (the plugin's own decision) and always, on host buffers (CPU
// codec), and where there is a CUDA device also auto and always with the resident GPU codec on
// pinned host buffers (NCCL_ZIP_GPU=1); it prints throughput, bytes on the wire, ratio, the GPU's
// share of the codec jobs and whether every received byte matched.
//
//   zipccl-demo [--mib=N] [--msg-kib=N] [--kind=bf16|fp32|random|ll|mix|shift] [--version=8..11]
//               [--plugin=PATH]
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device_mem.h"
#include "args.h"
#include "exchange.h"

using namespace zipccl::demo;

namespace {

// Whether there is a CUDA device (the resident GPU codec's rows), asked in a child process: the
// ranks are forked, and a parent that initialised CUDA must not fork.
bool cuda_device_present() {
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    std::string why;
    _exit(zipccl::client::have_cuda_device(&why) ? 0 : 1);
  }
  int st = 0;
  return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using zipccl::client::parse_uint;
  ExchangeConfig cfg;
  cfg.plugin = default_plugin_path();
  std::string kind = "bf16";
  const char* usage =
      "usage: zipccl-demo [--mib=N] [--msg-kib=N] [--kind=bf16|fp32|random|ll|mix|shift] [--version=8..11] "
      "[--plugin=PATH]\n"
      "  --mib: MiB each way (1..65536, default 256); --msg-kib: message size (1..65536, default 512)\n";
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    uint64_t v = 0;
    bool ok = true;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strncmp(a, "--mib=", 6)) {
      ok = parse_uint(a + 6, 1, 65536, &v);
      cfg.bytes = size_t(v) << 20;
    } else if (!strncmp(a, "--msg-kib=", 10)) {
      ok = parse_uint(a + 10, 1, 65536, &v);
      cfg.msg_bytes = size_t(v) << 10;
    } else if (!strncmp(a, "--kind=", 7)) {
      kind = a + 7;
      ok = zipccl::client::parse_kind(kind, &cfg.kind);
    } else if (!strncmp(a, "--version=", 10)) {
      ok = parse_uint(a + 10, 8, 11, &v);
      cfg.version = int(v);
    } else if (!strncmp(a, "--plugin=", 9)) {
      cfg.plugin = a + 9;
    } else {
      ok = false;
    }
    if (!ok) {
      fprintf(stderr, "zipccl-demo: bad argument %s\n%s", a, usage);
      return 2;
    }
  }
  const char* ifname = getenv("NCCL_SOCKET_IFNAME");
  cfg.env["NCCL_SOCKET_IFNAME"] = ifname ? ifname : "lo";

  printf("zipccl-demo: 2 ranks over %s through %s (ncclNet v%d)\n", cfg.env["NCCL_SOCKET_IFNAME"].c_str(),
         cfg.plugin.c_str(), cfg.version);
  printf("  %zu MiB each way in %zu KiB messages, 32 in flight, data: %s\n", cfg.bytes >> 20, cfg.msg_bytes >> 10,
         kind.c_str());
  printf("\n");
  printf("  %-26s %10s %12s %12s %7s %9s %9s %10s\n", "compression", "GB/s/dir", "MB in", "MB on wire", "ratio",
         "codec s", "GPU jobs", "bit-exact");
  struct Mode {
    const char* zip;  // NCCL_ZIP_ENABLE
    const char* gpu;  // NCCL_ZIP_GPU
    const char* label;
    bool pinned;
  };
  std::vector<Mode> modes = {
      {"0", "0", "off (plain transport)", false}, {"1", "0", "auto, CPU codec", false}, {"2", "0", "always, CPU codec", false}};
  const bool gpu = cuda_device_present();
  if (gpu) {
    modes.push_back({"1", "1", "auto, resident GPU codec", true});
    modes.push_back({"2", "1", "always, resident GPU codec", true});
  }
  int failures = 0;
  for (const Mode& m : modes) {
    cfg.env["NCCL_ZIP_ENABLE"] = m.zip;
    cfg.env["NCCL_ZIP_GPU"] = m.gpu;
    cfg.pinned = m.pinned;
    ExchangeResult r = run_exchange(cfg);
    if (!r.ok()) {
      printf("  %-26s FAILED: %s %s\n", m.label, r.rank[0].error, r.rank[1].error);
      ++failures;
      continue;
    }
    const double mb_in = r.rank[0].mb_in + r.rank[1].mb_in, mb_wire = r.rank[0].mb_wire + r.rank[1].mb_wire;
    printf("  %-26s %10.3f %12.1f %12.1f %7.3f %9.3f %9ld %10s\n", m.label, r.gbps(), mb_in, mb_wire, r.ratio(),
           r.rank[0].codec_s + r.rank[1].codec_s, r.rank[0].gpu_jobs + r.rank[1].gpu_jobs,
           r.bit_exact() ? "yes" : "NO");
    failures += !r.bit_exact();
  }
  printf("\n  codec: host buffers: CPU codec (NCCL_ZIP_CPU_THREADS per rank)%s\n",
         gpu ? "; with the resident GPU codec (NCCL_ZIP_GPU=1): pinned host buffers as NCCL's, coded on the GPU\n"
               "  while its kernel runs (GPU jobs: the send side's)"
             : "; no CUDA device here: the GPU rows are skipped");
  printf("\n  GB/s/dir: uncompressed bytes per second each way. 'auto' compresses only when the measured\n"
         "  codec outruns the link (lo reports no speed: 10 Gb/s assumed; NCCL_ZIP_LINK_MBPS overrides).\n");
  return failures ? 1 : 0;
}
