// Window study (docs/window.md): how close the codec's per-block window (window_base(): integer
// mean exponent) and the spec's RMS-sigma rule come to the best window found by brute force,
// on real tensors and synthetic distributions. Prints markdown tables.
//
//   window_study [--data DIR] [--elems N]
#include <initializer_list>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "analysis.h"
#include "synth.h"
#include "tensor_file.h"
#include "zipccl/codec.h"

namespace {

using namespace zipccl;
using namespace zipccl::tools;

// One tensor's blocks, with the bytes it was made from (for the message size).
struct Tensor {
  Codec codec;
  uint64_t bytes;
  std::vector<BlockHist> blocks;
};

struct RuleTotals {
  WindowAccuracy acc;
  uint64_t msg_bytes = 0;
};

void add(RuleTotals& t, const Tensor& x, const std::vector<uint32_t>& bases) {
  const WindowAccuracy a = window_accuracy(x.codec, x.blocks, bases);
  t.acc.blocks += a.blocks;
  t.acc.optimal += a.optimal;
  t.acc.exact += a.exact;
  t.acc.extra_bytes += a.extra_bytes;
  for (size_t i = 0; i < a.delta.size(); ++i) t.acc.delta[i] += a.delta[i];
  t.msg_bytes += message_bytes(x.codec, x.bytes, x.blocks, bases);
}

// Every tensor of a data set is its own message (as in zipccl-inspect).
void report(const std::string& name, const std::vector<Tensor>& tensors) {
  RuleTotals codec, rms, best, fixed;
  uint64_t bytes = 0, elems = 0;
  for (const Tensor& t : tensors) {
    bytes += t.bytes;
    elems += t.bytes / geometry(t.codec).elem_bytes;
    add(codec, t, rule_bases(t.codec, t.blocks, WindowRule::Codec));
    add(rms, t, rule_bases(t.codec, t.blocks, WindowRule::Rms));
    add(best, t, rule_bases(t.codec, t.blocks, WindowRule::Best));
    add(fixed, t, rule_bases(t.codec, t.blocks, WindowRule::BestFixed));
  }
  auto pct = [](uint64_t a, uint64_t b) { return b ? 100.0 * double(a) / double(b) : 100.0; };
  auto lost = [&](const RuleTotals& r) { return 8.0 * double(r.acc.extra_bytes) / double(elems); };
  auto ratio = [&](const RuleTotals& r) { return double(r.msg_bytes) / double(bytes); };
  const auto& d = codec.acc.delta;
  std::printf("| %s | %s | %llu | %.1f / %.1f | %.4f | %.1f / %.1f | %.4f | %.4f | %.4f | %.4f | %.4f | %llu/%llu/%llu/%llu/%llu |\n",
              name.c_str(), codec_name(tensors.front().codec), (unsigned long long)codec.acc.blocks,
              pct(codec.acc.exact, codec.acc.blocks), pct(codec.acc.optimal, codec.acc.blocks), lost(codec),
              pct(rms.acc.exact, rms.acc.blocks), pct(rms.acc.optimal, rms.acc.blocks), lost(rms), ratio(codec),
              ratio(rms), ratio(best), ratio(fixed), (unsigned long long)d[0], (unsigned long long)d[1],
              (unsigned long long)d[2], (unsigned long long)d[3], (unsigned long long)d[4]);
}

void table_header() {
  std::printf("| data | codec | blocks | window exact / optimal %% | window bits lost | RMS exact / optimal %% | "
              "RMS bits lost | ratio window | ratio RMS | ratio best/block | ratio best fixed/tensor | "
              "window - best: <=-2/-1/0/+1/>=+2 |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

Tensor make(Codec c, const std::vector<uint8_t>& v) { return {c, v.size(), block_histograms(c, v.data(), v.size())}; }

// The mean-exponent rule with another offset (in 1/1024), to see where the offset constant
// sits. At the codec's 3380 it must reproduce window_base() exactly; checked below.
uint32_t mean_exp_base(Codec c, const BlockHist& b, int64_t offset_q10) {
  uint64_t sum = 0;
  for (uint32_t e = 1; e < 256; ++e) sum += uint64_t(e) * b.h[e];
  const int64_t cnt = b.n - b.h[0];
  if (cnt == 0) return 0;
  const int64_t num = int64_t(sum) * 1024 - offset_q10 * cnt;
  if (num < 0) return 0;
  const int64_t base = num / (cnt * 1024), max_base = int64_t(geometry(c).exp_max) - (kWindow - 1);
  return uint32_t(base > max_base ? max_base : base);
}

// Ratio of a data set under per-block bases from base_of(tensor, block).
template <typename F>
double set_ratio(const std::vector<Tensor>& set, F base_of) {
  uint64_t bytes = 0, msg = 0;
  for (const Tensor& t : set) {
    std::vector<uint32_t> bases(t.blocks.size());
    for (size_t i = 0; i < bases.size(); ++i) bases[i] = base_of(t, t.blocks[i]);
    bytes += t.bytes;
    msg += message_bytes(t.codec, t.bytes, t.blocks, bases);
  }
  return double(msg) / double(bytes);
}

using Sets = std::vector<std::pair<std::string, std::vector<Tensor>>>;

void sets_header(const Sets& sets, const char* first) {
  std::printf("\n| %s | ", first);
  for (const auto& s : sets) std::printf("%s | ", s.first.c_str());
  std::printf("\n|---|");
  for (size_t i = 0; i < sets.size(); ++i) std::printf("---|");
  std::printf("\n");
}

void offset_sweep(const Sets& sets) {
  sets_header(sets, "offset");
  for (int64_t q = 2816; q <= 3840; q += 51) {  // 2.75 .. 3.75 in steps of ~0.05
    const int64_t off = std::abs(q - 3380) < 26 ? 3380 : q;  // the codec's own constant instead of its neighbour
    std::printf("| %.3f%s | ", double(off) / 1024, off == 3380 ? " (codec)" : "");
    for (const auto& s : sets) {
      std::printf("%.4f | ", set_ratio(s.second, [&](const Tensor& t, const BlockHist& b) {
                    const uint32_t base = mean_exp_base(t.codec, b, off);
                    if (off == 3380 && base != mean_base(t.codec, b)) {
                      std::fprintf(stderr, "window_study: mean_exp_base disagrees with window_base()\n");
                      std::exit(1);
                    }
                    return base;
                  }));
    }
    std::printf("\n");
  }
}

// Cheaper-than-histogram alternatives next to the references.
void rules_table(const Sets& sets) {
  sets_header(sets, "rule");
  auto row = [&](const char* name, auto base_of) {
    std::printf("| %s | ", name);
    for (const auto& s : sets) std::printf("%.4f | ", set_ratio(s.second, base_of));
    std::printf("\n");
  };
  row("mean-exp, offset 3.301", [](const Tensor& t, const BlockHist& b) { return mean_base(t.codec, b); });
  row("mean-exp, offset 3.0", [](const Tensor& t, const BlockHist& b) { return mean_exp_base(t.codec, b, 3072); });
  // The codec's rule, checked here against the escapes counted directly.
  row("mean-exp, then base-1..base+1 by fewest escapes (codec)", [](const Tensor& t, const BlockHist& b) {
    const uint32_t base = mean_base(t.codec, b), max_base = geometry(t.codec).exp_max - (kWindow - 1);
    uint32_t pick = base;
    for (uint32_t c : {base - 1, base + 1})  // base - 1 wraps above max_base when base is 0
      if (c <= max_base && block_escapes(b, c) < block_escapes(b, pick)) pick = c;
    if (pick != codec_base(t.codec, b)) {
      std::fprintf(stderr, "window_study: codec_base disagrees with the fewest-escapes pick\n");
      std::exit(1);
    }
    return pick;
  });
  row("RMS sigma (spec, floating point)", [](const Tensor& t, const BlockHist& b) { return rms_base(t.codec, b); });
  row("best per block (brute force)", [](const Tensor& t, const BlockHist& b) { return best_base(t.codec, b); });
  std::printf("| best fixed per tensor | ");
  for (const auto& s : sets) {
    uint64_t bytes = 0, msg = 0;
    for (const Tensor& t : s.second) {
      bytes += t.bytes;
      msg += message_bytes(t.codec, t.bytes, t.blocks, rule_bases(t.codec, t.blocks, WindowRule::BestFixed));
    }
    std::printf("%.4f | ", double(msg) / double(bytes));
  }
  std::printf("\n");
}

// Where the bytes above the coded payload go: the fixed cost of a message (128-byte header,
// block table, 128-byte section alignment, raw fallback of tiny tensors) against the ideal
// n * (R + K/8) + escapes of the same windows.
void overhead_row(const std::string& name, const std::vector<Tensor>& per_tensor, const Tensor& whole) {
  uint64_t bytes = 0, msg = 0, ideal = 0, ideal_fixed = 0;
  for (const Tensor& t : per_tensor) {
    const CodecGeometry g = geometry(t.codec);
    const uint64_t n = t.bytes / g.elem_bytes;
    const auto bases = rule_bases(t.codec, t.blocks, WindowRule::Codec);
    const auto fixed = rule_bases(t.codec, t.blocks, WindowRule::BestFixed);
    bytes += t.bytes;
    msg += message_bytes(t.codec, t.bytes, t.blocks, bases);
    ideal += n * g.res_planes + (n * g.bit_planes + 7) / 8;
    ideal_fixed += n * g.res_planes + (n * g.bit_planes + 7) / 8;
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      ideal += block_chunk_bytes(t.codec, t.blocks[i], bases[i]);
      ideal_fixed += block_chunk_bytes(t.codec, t.blocks[i], fixed[i]);
    }
  }
  const uint64_t whole_msg = message_bytes(whole.codec, whole.bytes, whole.blocks, rule_bases(whole.codec, whole.blocks, WindowRule::Codec));
  std::printf("| %s | %zu | %.4f | %.4f | %.4f | %.4f |\n", name.c_str(), per_tensor.size(), double(msg) / double(bytes),
              double(whole_msg) / double(whole.bytes), double(ideal) / double(bytes), double(ideal_fixed) / double(bytes));
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir = "../shared/data";
  if (const char* d = std::getenv("ZIPCCL_DATA_DIR")) data_dir = d;
  size_t elems = size_t(1) << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--data")) data_dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--elems")) elems = std::strtoull(argv[i + 1], nullptr, 10);
  }

  Sets sweep_sets;
  std::vector<Tensor> wholes;  // each file's data section as one message
  std::printf("### Real tensors (one message per tensor)\n\n");
  table_header();
  for (const char* f : {"weights_bf16", "grads_bf16", "acts_bf16", "grads_fp32"}) {
    TensorFile tf;
    std::string err;
    if (!load_tensor_file(data_dir + "/" + f + ".safetensors", DTypeHint::None, &tf, &err)) {
      std::fprintf(stderr, "window_study: %s\n", err.c_str());
      return 1;
    }
    std::vector<Tensor> ts;
    for (const TensorInfo& t : tf.tensors)
      ts.push_back({t.codec, t.bytes, block_histograms(t.codec, tf.data.data() + t.offset, t.bytes)});
    report(f, ts);
    const size_t start = tf.tensors.empty() ? tf.data.size() : tf.tensors.front().offset;
    wholes.push_back({ts.front().codec, tf.data.size() - start,
                      block_histograms(ts.front().codec, tf.data.data() + start, tf.data.size() - start)});
    sweep_sets.emplace_back(f, std::move(ts));
  }

  std::printf("\n### Message overhead (real tensors, codec window)\n\n");
  std::printf("| data | tensors | ratio, message per tensor | ratio, whole file one message | ideal, no header/padding | "
              "ideal, best fixed window per tensor |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < wholes.size(); ++i) overhead_row(sweep_sets[i].first, sweep_sets[i].second, wholes[i]);

  std::printf("\n### Synthetic i.i.d. data (%zu values, one message)\n\n", elems);
  table_header();
  struct Case {
    Codec c;
    Dist d;
    double scale;
  };
  const Case cases[] = {
      {Codec::BF16, Dist::Gaussian, 1e-37}, {Codec::BF16, Dist::Gaussian, 1e-6},  {Codec::BF16, Dist::Gaussian, 0.02},
      {Codec::BF16, Dist::Gaussian, 1.0},   {Codec::BF16, Dist::Gaussian, 1e4},   {Codec::BF16, Dist::Gaussian, 1e37},
      {Codec::BF16, Dist::Laplace, 0.02},   {Codec::BF16, Dist::Laplace, 1.0},    {Codec::BF16, Dist::StudentT3, 0.02},
      {Codec::BF16, Dist::StudentT3, 1.0},  {Codec::FP32, Dist::Gaussian, 1e-37}, {Codec::FP32, Dist::Gaussian, 0.02},
      {Codec::FP32, Dist::Gaussian, 1e37},  {Codec::FP32, Dist::Laplace, 0.02},   {Codec::FP32, Dist::StudentT3, 0.02},
      {Codec::FP16, Dist::Gaussian, 1e-6},  {Codec::FP16, Dist::Gaussian, 1e-3},  {Codec::FP16, Dist::Gaussian, 0.02},
      {Codec::FP16, Dist::Gaussian, 1.0},   {Codec::FP16, Dist::Gaussian, 1e4},   {Codec::FP16, Dist::Laplace, 0.02},
      {Codec::FP16, Dist::StudentT3, 0.02},
  };
  uint64_t seed = 1;
  for (const Case& k : cases) {
    char name[64];
    std::snprintf(name, sizeof name, "%s %g", dist_name(k.d), k.scale);
    std::vector<Tensor> ts = {make(k.c, synth(k.c, k.d, k.scale, elems, seed++))};
    report(name, ts);
    if (k.c == Codec::BF16 && k.scale == 0.02) sweep_sets.emplace_back(std::string(dist_name(k.d)) + " 0.02 bf16", std::move(ts));
  }

  // Where in its octave sigma falls decides which side of a floor() the statistic lands on.
  std::printf("\n### Gaussian bf16, sigma = 0.02 * 2^(j/8): one octave\n\n");
  table_header();
  std::vector<Tensor> octave;
  for (int j = 0; j < 8; ++j) {
    char name[64];
    const double sigma = 0.02 * std::exp2(j / 8.0);
    std::snprintf(name, sizeof name, "gaussian %.5f", sigma);
    octave.push_back(make(Codec::BF16, synth(Codec::BF16, Dist::Gaussian, sigma, elems / 8, 100 + j)));
    report(name, {octave.back()});
  }
  report("all 8 above", octave);
  sweep_sets.emplace_back("gaussian octave bf16", std::move(octave));

  std::printf("\n### Window rules: ratio per data set\n");
  rules_table(sweep_sets);
  std::printf("\n### Mean-exponent offset: ratio vs the constant in base = floor(mean_exp - offset)\n");
  offset_sweep(sweep_sets);
  return 0;
}
