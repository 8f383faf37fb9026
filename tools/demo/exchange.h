// A two-rank exchange through the real plugin over loopback: two processes, each sending to and
// receiving from the other with 32 requests in flight per direction, every received byte checked.
// Shared by zipccl-demo and zipccl-net-bench.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "traffic.h"

namespace zipccl::demo {

struct ExchangeConfig {
  std::string plugin;            // path of libnccl-net-zip.so
  int version = 11;              // ncclNet_vN table to drive
  size_t bytes = 256u << 20;     // per direction
  size_t msg_bytes = 512u << 10; // NCCL's Simple step size by default
  int channels = 1;              // run_pingpong: connections each way, all stepped at once
  client::Kind kind = client::Kind::kBf16;
  std::map<std::string, std::string> env;  // NCCL_ZIP_ENABLE, NCCL_SOCKET_IFNAME, ...
  // Host buffers pinned and mapped for the GPU, as NCCL's are (cudaHostAlloc): what the resident
  // GPU codec (NCCL_ZIP_GPU=1) codes.
  bool pinned = false;
};

struct RankResult {
  bool ok = false;            // ran to the end without a plugin error
  long bad_messages = 0;      // received messages whose bytes or size differ
  long messages = 0;          // received
  double seconds = 0;         // first post to last completion
  double mb_in = 0;           // sent, uncompressed (plugin's send summary)
  double mb_wire = 0;         // sent on the wire
  long compressed = 0;        // messages sent compressed
  long gpu_jobs = 0;          // of the send side's codec jobs, those the resident GPU codec ran
  double codec_s = 0;         // encode time on the send side
  char error[200] = "";
};

struct ExchangeResult {
  RankResult rank[2];
  bool ok() const;
  bool bit_exact() const;
  double gbps() const;   // GB/s per direction: bytes over the slower rank's time
  double ratio() const;  // wire / in over both ranks
};

ExchangeResult run_exchange(const ExchangeConfig& cfg);

// kRoundTrip: rank 0 sends one message of cfg.msg_bytes, rank 1 sends it back, each rank's receive
// posted before the other sends (as NCCL's proxy posts receives ahead). kStep: both ranks post a
// receive and send one message at once, then wait for both (a collective's ring step: the
// receive is posted as the peer's message goes). `iters` timed after a warm-up, every received
// byte checked. With cfg.channels > 1 each round trip or step moves one message on every channel
// at once (a collective's step over NCCL's channels, one proxy thread testing them all).
enum class Pattern { kRoundTrip, kStep };
struct LatencyResult {
  bool ok = false;
  double median_us = 0, p90_us = 0;  // per round trip or step, on rank 0
  char error[200] = "";
};
LatencyResult run_pingpong(const ExchangeConfig& cfg, Pattern pattern, int iters);
// The same over one TCP connection per channel on loopback, each end one thread busy-polling its
// non-blocking sockets: what NCCL's own Socket transport does by default (no helper threads).
LatencyResult run_tcp_pingpong(size_t bytes, int channels, Pattern pattern, int iters);

// Default plugin path: ZIPCCL_PLUGIN if set, else the installed one beside this tool (bin/../lib),
// else the build tree's.
std::string default_plugin_path();

}  // namespace zipccl::demo
