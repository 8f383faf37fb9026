// zipccl-inspect FILE...: how well zipccl compresses the tensors in .safetensors, .npy and raw
// files, and how good the codec's window choice is on them.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "analysis.h"
#include "tensor_file.h"
#include "zipccl/codec.h"

namespace {

using zipccl::tools::TensorAnalysis;

void usage() {
  std::fprintf(stderr,
               "usage: zipccl-inspect [--json] [--quiet] [--dtype bf16|fp16|fp32|auto] FILE...\n"
               "  .safetensors and .npy files carry their dtype; other files are raw tensors read\n"
               "  as --dtype (default auto: classify() guesses). --dtype also reinterprets 2- and\n"
               "  4-byte .npy dtypes (e.g. '<u2' holding bf16).\n"
               "  --quiet prints totals only; --json prints one JSON document.\n"
               "columns: codec = zipccl codec for the dtype, guess = classify() from the bytes alone,\n"
               "  ratio = zipccl::encode output / input (one message per tensor, header included),\n"
               "  best = the same with the brute-force best window per block, escapes = values\n"
               "  outside the codec's window, rawblk = blocks stored raw, win-opt = blocks whose\n"
               "  window has as few escapes as the best one, bits-lost = escape bytes above the\n"
               "  best window, in bits per value. See docs/window.md.\n");
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += char(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      o += buf;
    } else {
      o += char(ch);
    }
  }
  return o + "\"";
}

std::string shape_str(const std::vector<uint64_t>& shape, const char* open, const char* close) {
  std::string s = open;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + close;
}

// The numbers shared by tensors, files and the grand total.
std::string json_stats(const TensorAnalysis& a) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bytes\":%llu,\"elements\":%llu,\"encoded_bytes\":%llu,\"ratio\":%.6f,"
                "\"best_window_ratio\":%.6f,\"escape_rate\":%.6f,\"blocks\":%llu,\"raw_blocks\":%llu,"
                "\"raw_block_share\":%.6f,\"window_optimal_share\":%.6f,\"window_exact_share\":%.6f,"
                "\"bits_per_value_lost\":%.6f,\"bit_exact\":%s",
                (unsigned long long)a.bytes, (unsigned long long)a.elems, (unsigned long long)a.encoded_bytes,
                a.ratio(), a.bytes ? double(a.best_bytes) / double(a.bytes) : 1.0, a.escape_rate(),
                (unsigned long long)a.blocks, (unsigned long long)a.raw_blocks, a.raw_block_share(),
                a.window_match(), a.window.blocks ? double(a.window.exact) / double(a.window.blocks) : 1.0,
                a.bits_lost(), a.exact ? "true" : "false");
  return buf;
}

void print_row(const std::string& name, const std::string& dtype, const char* codec, const char* guess,
               const TensorAnalysis& a) {
  std::printf("%-34s %-8s %-5s %-5s %11llu %7.4f %7.4f %7.3f%% %6.2f%% %7.2f%% %8.4f\n", name.c_str(),
              dtype.c_str(), codec, guess, (unsigned long long)a.elems, a.ratio(),
              a.bytes ? double(a.best_bytes) / double(a.bytes) : 1.0, 100 * a.escape_rate(),
              100 * a.raw_block_share(), 100 * a.window_match(), a.bits_lost());
}

void print_header() {
  std::printf("%-34s %-8s %-5s %-5s %11s %7s %7s %8s %7s %8s %8s\n", "tensor", "dtype", "codec", "guess",
              "elements", "ratio", "best", "escapes", "rawblk", "win-opt", "bits-lost");
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false, quiet = false;
  zipccl::tools::DTypeHint hint = zipccl::tools::DTypeHint::None;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--dtype" || a.rfind("--dtype=", 0) == 0) {
      std::string v = a == "--dtype" ? (i + 1 < argc ? argv[++i] : "") : a.substr(8);
      if (!zipccl::tools::parse_dtype_hint(v, &hint)) {
        std::fprintf(stderr, "zipccl-inspect: bad --dtype '%s'\n", v.c_str());
        usage();
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "zipccl-inspect: unknown option %s\n", a.c_str());
      usage();
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    usage();
    return 2;
  }

  int rc = 0, unread = 0;
  TensorAnalysis total;
  std::string json_files;
  if (!json) print_header();
  for (const std::string& path : files) {
    zipccl::tools::TensorFile tf;
    std::string err;
    if (!zipccl::tools::load_tensor_file(path, hint, &tf, &err)) {
      std::fprintf(stderr, "zipccl-inspect: %s\n", err.c_str());
      rc = 1;
      ++unread;
      continue;
    }
    TensorAnalysis file_total;
    std::string json_tensors;
    for (const auto& t : tf.tensors) {
      const TensorAnalysis a = zipccl::tools::analyze(t.codec, tf.data.data() + t.offset, t.bytes);
      if (!a.exact) {
        std::fprintf(stderr, "zipccl-inspect: %s: %s: round trip is NOT bit-exact\n", path.c_str(), t.name.c_str());
        rc = 1;
      }
      if (!a.model_agrees) {
        std::fprintf(stderr, "zipccl-inspect: %s: %s: size model disagrees with the encoder\n", path.c_str(),
                     t.name.c_str());
        rc = 1;
      }
      file_total.add(a);
      if (json) {
        json_tensors += std::string(json_tensors.empty() ? "" : ",") + "{\"name\":" + json_str(t.name) +
                        ",\"dtype\":" + json_str(t.dtype) + ",\"shape\":" + shape_str(t.shape, "[", "]") +
                        ",\"codec\":\"" + zipccl::codec_name(a.codec) + "\",\"classified\":\"" +
                        zipccl::codec_name(a.classified) + "\"," + json_stats(a) + "}";
      } else if (!quiet) {
        print_row(t.name, t.dtype, zipccl::codec_name(a.codec), zipccl::codec_name(a.classified), a);
      }
    }
    total.add(file_total);
    if (json) {
      json_files += std::string(json_files.empty() ? "" : ",") + "{\"path\":" + json_str(path) +
                    ",\"tensors\":[" + json_tensors + "],\"total\":{" + json_stats(file_total) + "}}";
    } else {
      print_row("total " + path.substr(path.find_last_of('/') + 1), "", "", "", file_total);
      if (!quiet) std::printf("\n");
    }
  }
  // A file that could not be read was not checked: nothing can be said to be bit-exact then.
  if (unread) total.exact = false;
  if (json) {
    std::printf("{\"files\":[%s],\"unread_files\":%d,\"total\":{%s}}\n", json_files.c_str(), unread,
                json_stats(total).c_str());
  } else {
    if (files.size() > 1) print_row("TOTAL", "", "", "", total);
    if (unread)
      std::printf("round trip (encode, decode, compare): %d of %zu file(s) could not be read (see above)\n", unread,
                  files.size());
    else
      std::printf("round trip (encode, decode, compare): %s\n", total.exact ? "every tensor bit-exact" : "MISMATCH");
  }
  return rc;
}
