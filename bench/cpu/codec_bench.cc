// CPU codec throughput: encode and decode GB/s (input bytes per second) next to memcpy of the
// same buffer, measured in the same run. Each figure is the median of --repeats timed runs; a
// run repeats the operation for at least --min-ms.
//
//   codec_bench [--repeats N] [--min-ms MS] [--data DIR] [--sizes KIB,KIB...] [--cpu-time]
//
// --cpu-time times with the thread's CPU clock instead of the wall clock: on a machine shared
// with other jobs it leaves out the time the benchmark is not scheduled.
#include <initializer_list>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "synth.h"
#include "tensor_file.h"
#include "zipccl/codec.h"

namespace {

using namespace zipccl;
using Clock = std::chrono::steady_clock;

int g_repeats = 9;
double g_min_s = 0.05;
bool g_cpu_time = false;

double now_s() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Median over repeats of bytes/s for op(), which processes `bytes` per call.
double median_gbps(size_t bytes, const std::function<void()>& op) {
  op();  // warm caches and page tables
  std::vector<double> rates;
  for (int r = 0; r < g_repeats; ++r) {
    size_t iters = 0;
    const double t0 = now_s();
    double s = 0;
    do {
      op();
      ++iters;
      s = now_s() - t0;
    } while (s < g_min_s);
    rates.push_back(double(bytes) * double(iters) / s / 1e9);
  }
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return rates[rates.size() / 2];
}

void bench(const std::string& name, Codec c, const std::vector<uint8_t>& in) {
  const size_t n = in.size();
  std::vector<uint8_t> msg(max_compressed_bytes(n)), out(n);
  size_t mn = 0, on = 0;
  if (encode(c, in.data(), n, msg.data(), msg.size(), &mn) != Status::kOk ||
      decode(msg.data(), mn, out.data(), n, &on) != Status::kOk || on != n ||
      std::memcmp(out.data(), in.data(), n) != 0) {
    std::fprintf(stderr, "codec_bench: %s does not round-trip\n", name.c_str());
    std::exit(1);
  }
  const double cp = median_gbps(n, [&] { std::memcpy(out.data(), in.data(), n); });
  const double enc = median_gbps(n, [&] { encode(c, in.data(), n, msg.data(), msg.size(), &mn); });
  const double dec = median_gbps(n, [&] { decode(msg.data(), mn, out.data(), n, &on); });
  std::printf("%-24s %-5s %9zu %7.4f %8.2f %8.2f %8.2f %7.3f %7.3f\n", name.c_str(), codec_name(c), n / 1024,
              double(mn) / double(n), cp, enc, dec, enc / cp, dec / cp);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir = "../shared/data";
  if (const char* d = std::getenv("ZIPCCL_DATA_DIR")) data_dir = d;
  std::vector<size_t> sizes_kib = {512, 65536};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--repeats") g_repeats = std::max(1, std::atoi(v)), ++i;
    else if (a == "--min-ms") g_min_s = std::atof(v) / 1000, ++i;
    else if (a == "--data") data_dir = v, ++i;
    else if (a == "--cpu-time") g_cpu_time = true;
    else if (a == "--sizes") {
      sizes_kib.clear();
      for (const char* p = v; *p;) {
        sizes_kib.push_back(std::strtoull(p, const_cast<char**>(&p), 10));
        if (*p == ',') ++p;
        else if (*p) break;
      }
      ++i;
    } else {
      std::fprintf(stderr, "usage: codec_bench [--repeats N] [--min-ms MS] [--data DIR] [--sizes KIB,...] [--cpu-time]\n");
      return 2;
    }
  }

  std::printf("%-24s %-5s %9s %7s %8s %8s %8s %7s %7s\n", "input", "codec", "KiB", "ratio", "memcpy", "enc GB/s",
              "dec GB/s", "enc/cp", "dec/cp");
  for (size_t kib : sizes_kib) {
    for (Codec c : {Codec::BF16, Codec::FP16, Codec::FP32}) {
      const size_t elems = kib * 1024 / geometry(c).elem_bytes;
      bench("gaussian(0.02)", c, tools::synth(c, tools::Dist::Gaussian, 0.02, elems, 1));
    }
  }
  // Real tensors: each file's data section as one buffer, whole and as its first 512 KiB.
  for (const char* f : {"weights_bf16", "grads_bf16", "acts_bf16", "grads_fp32"}) {
    tools::TensorFile tf;
    std::string err;
    if (!tools::load_tensor_file(data_dir + "/" + f + ".safetensors", tools::DTypeHint::None, &tf, &err)) {
      std::fprintf(stderr, "codec_bench: skipping real data: %s\n", err.c_str());
      break;
    }
    const Codec c = tf.tensors.front().codec;
    const size_t start = tf.tensors.front().offset;
    std::vector<uint8_t> all(tf.data.begin() + start, tf.data.end());
    bench(f, c, all);
    all.resize(std::min<size_t>(all.size(), 512 * 1024));
    bench(f, c, all);
  }
  return 0;
}
