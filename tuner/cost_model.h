// The tuner's model: for one collective, NCCL's own predicted times (its cost table) against its
// Simple entries with compression on the path the net plugin measures (tree, ring and PAT, where
// NCCL's table has them: the algorithms whose traffic crosses our network; every Simple message
// through it is compressed alike). NCCL's estimate is taken as given; compression takes
// (1 - ratio) x the wire time off it, bounded below by the codec's throughput, and adds the codec's
// latency on the first and last message. So among the algorithms of a collective (the ZipCCL
// paper's reduce-scatter switch) the one that gains most from the ratio wins.
#pragma once

#include <cstddef>

namespace zipccl::tuner {

struct Path {
  int nranks = 0, nnodes = 0;
  bool enabled = false;   // compression not off (NCCL_ZIP_ENABLE)
  double link_bps = 0;    // one NIC's rate, bytes/s
  double codec_bps = 0;   // the codec's rate encoding and decoding at once, bytes/s; 0 while unmeasured
  double ratio = 1;       // wire / input bytes of compressed traffic, as configured
  bool codec_keeps_up = false;  // the net plugin compresses on this path: steer NCCL there only then
};

struct Choice {
  bool compressed = false;
  int algo = -1;            // the Simple entry with the best compressed time
  float compressed_us = 0;  // its predicted time with compression
  float native_us = 0;      // NCCL's cheapest entry
};

constexpr double kMargin = 1.05;          // compression must win by this factor
constexpr double kMaxRatio = 0.95;        // data that compresses less stays native
constexpr double kSliceBytes = 1 << 20;   // one message: its encode and decode are not hidden

// Bytes each of nranks ranks sends for collective func of nbytes (NCCL's nBytes: all_gather's and
// reduce_scatter's whole buffer): (n-1)/n of it, twice for all_reduce (a reduce-scatter, then an
// all-gather), all of it for broadcast and reduce.
double sent_bytes(int func, size_t nbytes, int nranks);

// table: NCCL's times in us, row-major [nalgo][nproto], kIgnore where an entry does not apply.
Choice choose(int func, size_t nbytes, const float* table, int nalgo, int nproto, const Path& p);

}  // namespace zipccl::tuner
