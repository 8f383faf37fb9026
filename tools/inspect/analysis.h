// Compression analysis of one tensor: the real encoder's ratio, and how the codec's per-block
// window (window_base() in format.h) compares with the best window found by brute force and
// with alternative window rules. Shared by zipccl-inspect, the window study and the tests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "zipccl/format.h"

namespace zipccl::tools {

// Exponent histogram of one block, plus what the RMS rule needs.
struct BlockHist {
  uint32_t n = 0;
  std::array<uint32_t, 256> h{};  // h[e] = elements whose exponent field is e
  double sum_sq = 0;              // sum of the squared values (finite values only)
};

std::vector<BlockHist> block_histograms(Codec c, const uint8_t* p, size_t nbytes);

// Escapes of a block under window base: elements whose exponent is outside [base, base+6].
uint32_t block_escapes(const BlockHist& b, uint32_t base);
// window_base() on the block's mean nonzero exponent, and the codec's window: that base as the
// encoders refine it (refine_window_base()).
uint32_t mean_base(Codec c, const BlockHist& b);
uint32_t codec_base(Codec c, const BlockHist& b);
// The spec's RMS-sigma rule: bias-relative 122 + floor(log2(rms) + 0.283), clamped.
uint32_t rms_base(Codec c, const BlockHist& b);
// The base with the fewest escapes (lowest such base on ties).
uint32_t best_base(Codec c, const BlockHist& b);

// Bytes a block puts in the escape section under base, with the encoder's raw-block decision.
uint32_t block_chunk_bytes(Codec c, const BlockHist& b, uint32_t base);

// Message size the encoder produces for given per-block bases: fixed sections + escape chunks,
// or the raw fallback (header + input) when coding does not pay (EncodeOptions defaults).
uint64_t message_bytes(Codec c, uint64_t nbytes, const std::vector<BlockHist>& blocks,
                       const std::vector<uint32_t>& bases);

enum class WindowRule { Codec, Rms, Best, BestFixed };
// Per-block bases of a rule; BestFixed is the one base that minimizes the whole tensor's size.
std::vector<uint32_t> rule_bases(Codec c, const std::vector<BlockHist>& blocks, WindowRule rule);

struct WindowAccuracy {
  uint64_t blocks = 0;
  uint64_t optimal = 0;       // blocks where the rule's window has as few escapes as the best
  uint64_t exact = 0;         // blocks where the rule's base equals best_base()
  int64_t extra_bytes = 0;    // escape-section bytes above the per-block best
  std::array<uint64_t, 5> delta{};  // base - best_base() clamped to -2..+2
};
WindowAccuracy window_accuracy(Codec c, const std::vector<BlockHist>& blocks, const std::vector<uint32_t>& bases);

struct TensorAnalysis {
  Codec codec = Codec::Raw;
  Codec classified = Codec::Raw;  // classify()'s guess from the bytes alone
  uint64_t bytes = 0, elems = 0;
  uint64_t encoded_bytes = 0;     // zipccl::encode with `codec`
  uint64_t blocks = 0, raw_blocks = 0;
  uint64_t escapes = 0;           // escape codes under the codec's window, over all blocks
  WindowAccuracy window;          // the codec's window vs the per-block best
  uint64_t best_bytes = 0;        // message size with the per-block best window
  bool model_agrees = true;       // message_bytes() predicted encoded_bytes exactly
  bool exact = true;              // decode(encode(x)) == x, byte for byte

  double ratio() const { return bytes ? double(encoded_bytes) / double(bytes) : 1.0; }
  double escape_rate() const { return elems ? double(escapes) / double(elems) : 0.0; }
  double raw_block_share() const { return blocks ? double(raw_blocks) / double(blocks) : 0.0; }
  double window_match() const { return window.blocks ? double(window.optimal) / double(window.blocks) : 1.0; }
  double bits_lost() const { return elems ? 8.0 * double(window.extra_bytes) / double(elems) : 0.0; }

  // Accumulate another tensor's numbers (for file and grand totals).
  void add(const TensorAnalysis& o);
};

// Analyse nbytes at p as codec c. Encodes for real, decodes the message and compares it with the
// input, and cross-checks the model of the encoder (message_bytes with the codec's bases) against
// the encoder's output size.
TensorAnalysis analyze(Codec c, const uint8_t* p, size_t nbytes);

}  // namespace zipccl::tools
