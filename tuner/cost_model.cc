#include "cost_model.h"

#include <algorithm>

#include "tuner_abi.h"

namespace zipccl::tuner {

double sent_bytes(int func, size_t nbytes, int nranks) {
  const double n = nranks > 1 ? nranks : 2;
  if (func == kAllReduce) return double(nbytes) * 2 * (n - 1) / n;
  if (func == kAllGather || func == kReduceScatter) return double(nbytes) * (n - 1) / n;
  return double(nbytes);  // broadcast, reduce: the whole buffer passes every rank
}

Choice choose(int func, size_t nbytes, const float* table, int nalgo, int nproto, const Path& p) {
  auto at = [&](int a, int q) { return table[a * nproto + q]; };
  Choice c;
  float best = -1;
  for (int a = 0; a < nalgo; ++a)
    for (int q = 0; q < nproto; ++q)
      if (at(a, q) >= 0 && (best < 0 || at(a, q) < best)) best = at(a, q);
  c.native_us = best;
  // Only what crosses the network compresses and only Simple may carry it.
  if (!p.enabled || p.nnodes < 2 || p.nranks < 2 || best < 0 || nproto <= kProtoSimple) return c;
  if (!p.codec_keeps_up || p.link_bps <= 0 || p.codec_bps <= 0 || p.ratio > kMaxRatio) return c;
  const double sent = sent_bytes(func, nbytes, p.nranks);
  const double saved_s = sent / p.link_bps * (1 - p.ratio);
  const double latency_s = 2 * std::min(sent, kSliceBytes) / p.codec_bps;
  for (int a : {kAlgoTree, kAlgoRing, kAlgoPat}) {
    if (a >= nalgo || at(a, kProtoSimple) < 0) continue;
    const double coded_s = std::max(at(a, kProtoSimple) * 1e-6 - saved_s, sent / p.codec_bps) + latency_s;
    if (c.algo < 0 || coded_s * 1e6 < c.compressed_us) {
      c.algo = a;
      c.compressed_us = float(coded_s * 1e6);
    }
  }
  c.compressed = c.algo >= 0 && c.compressed_us * kMargin < best;
  return c;
}

}  // namespace zipccl::tuner
