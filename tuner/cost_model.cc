#include "cost_model.h"

#include <algorithm>

#include "tuner_abi.h"

namespace zipccl::tuner {

double sent_bytes(int func, size_t nbytes, int nranks) {
  const double n = nranks > 1 ? nranks : 2;
  return double(nbytes) * (n - 1) / n * (func == kAllReduce ? 2 : 1);
}

Choice choose(int func, size_t nbytes, const float* table, int nalgo, int nproto, const Path& p) {
  auto at = [&](int a, int q) { return table[a * nproto + q]; };
  Choice c;
  float best = -1;
  for (int a = 0; a < nalgo; ++a)
    for (int q = 0; q < nproto; ++q)
      if (at(a, q) >= 0 && (best < 0 || at(a, q) < best)) best = at(a, q);
  c.native_us = best;
  // Only what crosses the network compresses, only Simple may carry it, and only the ring
  // collectives are modelled.
  const bool ring_coll = func == kAllGather || func == kReduceScatter || func == kAllReduce;
  if (!ring_coll || !p.enabled || p.nnodes < 2 || p.nranks < 2 || best < 0) return c;
  if (nalgo <= kAlgoRing || nproto <= kProtoSimple || at(kAlgoRing, kProtoSimple) < 0) return c;
  if (!p.codec_keeps_up || p.link_bps <= 0 || p.codec_bps <= 0 || p.ratio > kMaxRatio) return c;
  const double sent = sent_bytes(func, nbytes, p.nranks);
  const double wire_s = sent / p.link_bps;
  const double simple_s = at(kAlgoRing, kProtoSimple) * 1e-6;
  const double coded_s = std::max(simple_s - wire_s * (1 - p.ratio), sent / p.codec_bps);
  const double latency_s = 2 * std::min(sent, kSliceBytes) / p.codec_bps;
  c.compressed_us = float((coded_s + latency_s) * 1e6);
  c.compressed = c.compressed_us * kMargin < best;
  return c;
}

}  // namespace zipccl::tuner
