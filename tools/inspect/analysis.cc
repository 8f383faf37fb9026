#include "analysis.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fp16.h"
#include "zipccl/codec.h"

namespace zipccl::tools {
namespace {

uint32_t max_base(Codec c) { return geometry(c).exp_max - (kWindow - 1); }

// Value of an element given as raw bits, for the RMS rule.
double elem_value(Codec c, uint32_t v) {
  switch (c) {
    case Codec::BF16: {
      float f;
      const uint32_t u = v << 16;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case Codec::FP16:
      return fp16_to_double(static_cast<uint16_t>(v));
    default: {
      float f;
      std::memcpy(&f, &v, 4);
      return f;
    }
  }
}

}  // namespace

std::vector<BlockHist> block_histograms(Codec c, const uint8_t* p, size_t nbytes) {
  std::vector<BlockHist> out;
  if (c == Codec::Raw) return out;
  const uint32_t es = geometry(c).elem_bytes;
  const uint64_t n = nbytes / es;
  out.resize((n + kBlockElems - 1) / kBlockElems);
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t v = 0;
    std::memcpy(&v, p + i * es, es);  // little-endian host
    BlockHist& b = out[i / kBlockElems];
    ++b.n;
    ++b.h[elem_exponent(c, v)];
    const double x = elem_value(c, v);
    if (std::isfinite(x)) b.sum_sq += x * x;
  }
  return out;
}

uint32_t block_escapes(const BlockHist& b, uint32_t base) {
  uint32_t inside = 0;
  for (uint32_t e = base; e < base + kWindow && e < 256; ++e) inside += b.h[e];
  return b.n - inside;
}

uint32_t mean_base(Codec c, const BlockHist& b) {
  uint64_t sum = 0;
  for (uint32_t e = 1; e < 256; ++e) sum += uint64_t(e) * b.h[e];
  return window_base(c, sum, b.n - b.h[0]);
}

uint32_t codec_base(Codec c, const BlockHist& b) {
  const uint32_t base = mean_base(c, b);
  const auto at = [&](uint32_t e) { return e < 256 ? int32_t(b.h[e]) : 0; };
  return refine_window_base(c, base, at(base + kWindow - 1) - (base > 0 ? at(base - 1) : 0), at(base) - at(base + kWindow));
}

uint32_t rms_base(Codec c, const BlockHist& b) {
  if (b.n == 0 || b.sum_sq == 0) return 0;
  const double rms = std::sqrt(b.sum_sq / b.n);
  // 122 is bias 127 - 5 for bf16/fp32; fp16 (bias 15) shifts by the bias difference.
  const double bias = c == Codec::FP16 ? 122.0 - 127.0 + 15.0 : 122.0;
  const double base = bias + std::floor(std::log2(rms) + 0.283);
  if (!(base > 0)) return 0;
  return base > max_base(c) ? max_base(c) : static_cast<uint32_t>(base);
}

uint32_t best_base(Codec c, const BlockHist& b) {
  uint32_t best = 0, best_esc = UINT32_MAX;
  for (uint32_t base = 0; base <= max_base(c); ++base) {
    const uint32_t esc = block_escapes(b, base);
    if (esc < best_esc) best = base, best_esc = esc;
  }
  return best;
}

uint32_t block_chunk_bytes(Codec c, const BlockHist& b, uint32_t base) {
  const uint32_t esc = block_escapes(b, base);
  const uint32_t raw_chunk = raw_chunk_bytes(make_layout(c, uint64_t(b.n) * geometry(c).elem_bytes), b.n);
  return esc > raw_chunk ? raw_chunk : esc;
}

uint64_t message_bytes(Codec c, uint64_t nbytes, const std::vector<BlockHist>& blocks,
                       const std::vector<uint32_t>& bases) {
  const uint64_t raw = kHeaderBytes + nbytes;
  if (c == Codec::Raw || nbytes < geometry(c).elem_bytes) return raw;
  const Layout L = make_layout(c, nbytes);
  if (L.off_esc > raw) return raw;  // a tie keeps the coded message, as the encoder does
  uint64_t total = L.off_esc;
  for (size_t i = 0; i < blocks.size(); ++i) total += block_chunk_bytes(c, blocks[i], bases[i]);
  return total > raw ? raw : total;
}

std::vector<uint32_t> rule_bases(Codec c, const std::vector<BlockHist>& blocks, WindowRule rule) {
  std::vector<uint32_t> bases(blocks.size());
  if (rule == WindowRule::BestFixed) {
    uint32_t best = 0;
    uint64_t best_bytes = UINT64_MAX;
    for (uint32_t base = 0; base <= max_base(c); ++base) {
      uint64_t bytes = 0;
      for (const BlockHist& b : blocks) bytes += block_chunk_bytes(c, b, base);
      if (bytes < best_bytes) best = base, best_bytes = bytes;
    }
    std::fill(bases.begin(), bases.end(), best);
    return bases;
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    switch (rule) {
      case WindowRule::Codec: bases[i] = codec_base(c, blocks[i]); break;
      case WindowRule::Rms: bases[i] = rms_base(c, blocks[i]); break;
      default: bases[i] = best_base(c, blocks[i]); break;
    }
  }
  return bases;
}

WindowAccuracy window_accuracy(Codec c, const std::vector<BlockHist>& blocks, const std::vector<uint32_t>& bases) {
  WindowAccuracy a;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const uint32_t best = best_base(c, blocks[i]);
    ++a.blocks;
    a.optimal += block_escapes(blocks[i], bases[i]) == block_escapes(blocks[i], best);
    a.exact += bases[i] == best;
    a.extra_bytes += int64_t(block_chunk_bytes(c, blocks[i], bases[i])) - block_chunk_bytes(c, blocks[i], best);
    const int64_t d = std::clamp<int64_t>(int64_t(bases[i]) - best, -2, 2);
    ++a.delta[size_t(d + 2)];
  }
  return a;
}

void TensorAnalysis::add(const TensorAnalysis& o) {
  bytes += o.bytes;
  elems += o.elems;
  encoded_bytes += o.encoded_bytes;
  blocks += o.blocks;
  raw_blocks += o.raw_blocks;
  escapes += o.escapes;
  best_bytes += o.best_bytes;
  window.blocks += o.window.blocks;
  window.optimal += o.window.optimal;
  window.exact += o.window.exact;
  window.extra_bytes += o.window.extra_bytes;
  for (size_t i = 0; i < window.delta.size(); ++i) window.delta[i] += o.window.delta[i];
  model_agrees = model_agrees && o.model_agrees;
  exact = exact && o.exact;
}

TensorAnalysis analyze(Codec c, const uint8_t* p, size_t nbytes) {
  TensorAnalysis t;
  t.codec = c;
  t.classified = classify(p, nbytes);
  t.bytes = nbytes;
  t.elems = nbytes / geometry(c).elem_bytes;
  std::vector<uint8_t> msg(max_compressed_bytes(nbytes));
  size_t mn = 0;
  std::vector<uint8_t> back(nbytes);
  size_t bn = 0;
  t.exact = encode(c, p, nbytes, msg.data(), msg.size(), &mn) == Status::kOk &&
            decode(msg.data(), mn, back.data(), back.size(), &bn) == Status::kOk && bn == nbytes &&
            (nbytes == 0 || std::memcmp(back.data(), p, nbytes) == 0);
  t.encoded_bytes = t.exact ? mn : kHeaderBytes + nbytes;

  const auto blocks = block_histograms(c, p, nbytes);
  const auto bases = rule_bases(c, blocks, WindowRule::Codec);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const uint32_t esc = block_escapes(blocks[i], bases[i]);
    t.escapes += esc;
    t.raw_blocks += esc != block_chunk_bytes(c, blocks[i], bases[i]);
  }
  t.blocks = blocks.size();
  t.window = window_accuracy(c, blocks, bases);
  t.best_bytes = message_bytes(c, nbytes, blocks, rule_bases(c, blocks, WindowRule::Best));
  t.model_agrees = message_bytes(c, nbytes, blocks, bases) == t.encoded_bytes;
  return t;
}

}  // namespace zipccl::tools
