// zipccl-nccl-check: every NCCL collective through the C API, one process per rank, each result
// checked against what it must be and its digest printed, so that runs over different
// transports (NCCL's Socket, the plugin raw, compressed) can be compared byte for byte
// (scripts/device-nccl-check.sh, bench/nccl/compare_checks.py).
//
//   zipccl-nccl-check --rank=R --nranks=N --id=FILE [--data=DIR] [--device=D] [--max-elems=E]
//
// Rank 0 writes the communicator's unique id to FILE; the others wait for it. Every rank runs
// the same cases in the same order: all_reduce (sum, max), all_gather, reduce_scatter, broadcast,
// reduce, alltoall and an uneven alltoallv (grouped send/recv), a ring of send/recv; bf16, fp16,
// fp32, int32, int8; Gaussian, real (DIR's .safetensors), random-byte and small-integer data;
// element counts 1, 4099 and E+3. Each case prints
//   CASE <name> <digest> ok=<0|1> [order]
// where ok says the output equals the expected one computed on the host from every rank's
// inputs, and "order" marks a floating-point sum with no exact expectation (its value depends on
// NCCL's reduction order, the same only between runs of the same algorithm and channels): there
// ok says every element lies within the rounding error of some order of the sum. The
// last line: RESULT rank=R ok=<0|1> cases=<n> failed=<n> nccl=<version>.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "check_data.h"

using namespace zipccl::check;

namespace {

#define CUDA_CHECK(x)                                                                          \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)
#define NCCL_CHECK(x)                                                                          \
  do {                                                                                         \
    ncclResult_t r_ = (x);                                                                     \
    if (r_ != ncclSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

struct Args {
  int rank = -1, nranks = 0, device = 0;
  std::string id_file, data_dir;
  size_t max_elems = size_t(1) << 20;
};

enum class Coll { AllReduceSum, AllReduceMax, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, AllToAllV, SendRecv };
const char* coll_name(Coll c) {
  static const char* const n[] = {"all_reduce_sum", "all_reduce_max", "all_gather", "reduce_scatter", "broadcast",
                                  "reduce", "alltoall", "alltoallv", "sendrecv"};
  return n[int(c)];
}
bool is_sum(Coll c) { return c == Coll::AllReduceSum || c == Coll::ReduceScatter || c == Coll::Reduce; }
bool is_float(DType t) { return t == DType::BF16 || t == DType::FP16 || t == DType::FP32; }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::BF16: return ncclBfloat16;
    case DType::FP16: return ncclFloat16;
    case DType::FP32: return ncclFloat32;
    case DType::INT32: return ncclInt32;
    case DType::INT8: return ncclInt8;
  }
  return ncclInt8;
}

struct Case {
  Coll coll;
  DType t;
  Fill f;
  size_t count;  // elements per rank and peer (alltoallv: the unit of its uneven counts)
  uint64_t seed;
  std::string name;
};

// Bytes are moved, never reduced (NaN payloads); a sum of floating-point Gaussian or real data
// has no exact expectation, but is run and digested all the same.
std::vector<Case> cases(const Args& a, const RealPool& pool) {
  std::vector<Case> v;
  const Coll colls[] = {Coll::AllReduceSum, Coll::AllReduceMax, Coll::AllGather, Coll::ReduceScatter, Coll::Broadcast,
                        Coll::Reduce,       Coll::AllToAll,     Coll::AllToAllV, Coll::SendRecv};
  const DType types[] = {DType::BF16, DType::FP16, DType::FP32, DType::INT32, DType::INT8};
  const Fill fills[] = {Fill::Gauss, Fill::Real, Fill::Bytes, Fill::Ints};
  const size_t counts[] = {1, 4099, a.max_elems + 3};
  uint64_t seed = 1;
  for (Coll c : colls)
    for (DType t : types)
      for (Fill f : fills) {
        if (f == Fill::Real && !pool.has(t)) continue;
        if (f == Fill::Bytes && (is_sum(c) || c == Coll::AllReduceMax)) continue;
        for (size_t n : counts) {
          char name[128];
          std::snprintf(name, sizeof name, "%s/%s/%s/%zu", coll_name(c), dtype_name(t), fill_name(f), n);
          v.push_back({c, t, f, n, seed++, name});
        }
      }
  return v;
}

// alltoallv: rank i sends count * ((i * 3 + j * 5) % 4) / 2 elements to rank j (none to some,
// up to 1.5x count to others).
size_t vcount(const Case& c, int from, int to) { return c.count * size_t((from * 3 + to * 5) % 4) / 2; }

class Checker {
 public:
  Checker(const Args& a, ncclComm_t comm, cudaStream_t s, const RealPool& pool)
      : a_(a), comm_(comm), s_(s), pool_(pool) {}

  // Runs c; *ok: the output is the expected one; *order: no exact expectation. Returns the digest.
  uint64_t run(const Case& c, bool* ok, bool* order) {
    const size_t es = dtype_bytes(c.t), n = size_t(a_.nranks), cnt = c.count;
    const int r = a_.rank;
    *order = is_sum(c.coll) && is_float(c.t) && c.f != Fill::Ints;
    auto input = [&](int rank, size_t elems) { return make_input(c.t, c.f, elems, c.seed, rank, pool_); };
    Bytes in, expect;
    std::function<Bytes(int, size_t)> sum_of;  // sums: every rank's input, elements from sum_from
    size_t sum_from = 0;
    size_t out_elems = cnt;
    switch (c.coll) {
      case Coll::AllReduceSum:
      case Coll::AllReduceMax:
        in = input(r, cnt);
        if (!*order) expect = reduce_all(c, cnt, 0, input);
        sum_of = input;
        break;
      case Coll::AllGather:
        in = input(r, cnt);
        out_elems = cnt * n;
        for (int k = 0; k < int(n); ++k) append(&expect, input(k, cnt));
        break;
      case Coll::ReduceScatter:
        in = input(r, cnt * n);
        sum_of = [&](int k, size_t) { return input(k, cnt * n); };
        sum_from = size_t(r) * cnt;
        if (!*order) expect = reduce_all(c, cnt, sum_from, sum_of);
        break;
      case Coll::Broadcast:
        in = r == int(n) - 1 ? input(r, cnt) : Bytes(cnt * es, 0xA5);
        expect = input(int(n) - 1, cnt);
        break;
      case Coll::Reduce:
        in = input(r, cnt);
        if (r == 0 && !*order) expect = reduce_all(c, cnt, 0, input);
        if (r == 0) sum_of = input;
        break;
      case Coll::AllToAll:
        in = input(r, cnt * n);
        out_elems = cnt * n;
        for (int k = 0; k < int(n); ++k) {
          const Bytes x = input(k, cnt * n);
          expect.insert(expect.end(), x.begin() + long(size_t(r) * cnt * es), x.begin() + long(size_t(r + 1) * cnt * es));
        }
        break;
      case Coll::AllToAllV: {
        size_t sent = 0;
        for (int j = 0; j < int(n); ++j) sent += vcount(c, r, j);
        in = input(r, sent);
        out_elems = 0;
        for (int k = 0; k < int(n); ++k) {
          size_t total = 0, off = 0;
          for (int j = 0; j < int(n); ++j) total += vcount(c, k, j);
          for (int j = 0; j < r; ++j) off += vcount(c, k, j);
          const Bytes x = input(k, total);
          const size_t m = vcount(c, k, r);
          expect.insert(expect.end(), x.begin() + long(off * es), x.begin() + long((off + m) * es));
          out_elems += m;
        }
        break;
      }
      case Coll::SendRecv:
        in = input(r, cnt);
        expect = input((r + int(n) - 1) % int(n), cnt);
        break;
    }
    Bytes out(out_elems * es, 0x5A);
    void* din = device_copy(in);
    void* dout = device_copy(out);
    launch(c, din, dout);
    CUDA_CHECK(cudaStreamSynchronize(s_));
    CUDA_CHECK(cudaMemcpy(out.data(), dout, out.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(din));
    CUDA_CHECK(cudaFree(dout));
    if (c.coll == Coll::Reduce && r != 0) out.clear();  // only the root's output is defined
    *ok = *order ? (!sum_of || near_sum(c, out, sum_from, sum_of)) : same(c, out, expect);
    return digest(out.data(), out.size());
  }

 private:
  static void append(Bytes* to, const Bytes& x) { to->insert(to->end(), x.begin(), x.end()); }

  // On the collective's stream: a cudaMemcpy from pageable memory may return before its DMA
  // lands, and NCCL's stream does not wait for the legacy stream, so the copy could overwrite
  // the collective's output (seen on the H200: an all_reduce's output still the 0x5A fill).
  void* device_copy(const Bytes& b) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(b.size(), 1)));
    if (!b.empty()) CUDA_CHECK(cudaMemcpyAsync(p, b.data(), b.size(), cudaMemcpyHostToDevice, s_));
    return p;
  }

  // The element-wise sum (integers: wrapping in the type) or max of every rank's input, elements
  // [from, from + cnt). Floating-point sums are only asked for of small integers: exact.
  Bytes reduce_all(const Case& c, size_t cnt, size_t from, const std::function<Bytes(int, size_t)>& input) {
    const size_t es = dtype_bytes(c.t);
    std::vector<Bytes> xs;
    for (int k = 0; k < a_.nranks; ++k) xs.push_back(input(k, from + cnt));
    Bytes out(cnt * es);
    for (size_t i = 0; i < cnt; ++i) {
      if (c.coll == Coll::AllReduceMax) {
        int best = 0;
        for (int k = 1; k < a_.nranks; ++k)
          if (value(c.t, xs[size_t(k)].data(), from + i) > value(c.t, xs[size_t(best)].data(), from + i)) best = k;
        std::memcpy(&out[i * es], &xs[size_t(best)][(from + i) * es], es);
        continue;
      }
      int64_t sum = 0;
      for (int k = 0; k < a_.nranks; ++k) sum += int64_t(value(c.t, xs[size_t(k)].data(), from + i));
      put_int(c.t, out.data(), i, sum);  // int32/int8: the conversion wraps, as the GPU's sum
    }
    return out;
  }

  // A floating-point sum of n values in any order, rounded to the type (unit roundoff u) after
  // each addition, is within n * u * sum|x| (plus a subnormal step per rounding) of the exact
  // sum. Reports the first element outside.
  bool near_sum(const Case& c, const Bytes& out, size_t from, const std::function<Bytes(int, size_t)>& input) const {
    const size_t es = dtype_bytes(c.t), cnt = out.size() / es;
    const double u = c.t == DType::BF16 ? 0x1p-8 : c.t == DType::FP16 ? 0x1p-11 : 0x1p-24;
    const double tiny = c.t == DType::BF16 ? 0x1p-133 : c.t == DType::FP16 ? 0x1p-24 : 0x1p-149;  // subnormal step
    std::vector<Bytes> xs;
    for (int k = 0; k < a_.nranks; ++k) xs.push_back(input(k, from + cnt));
    size_t bad = 0, first = 0;
    double first_exact = 0, first_bound = 0;
    for (size_t i = 0; i < cnt; ++i) {
      double exact = 0, mag = 0;
      for (const Bytes& x : xs) {
        const double v = value(c.t, x.data(), from + i);
        exact += v;
        mag += std::fabs(v);
      }
      if (!std::isfinite(exact) || !std::isfinite(mag)) continue;  // overflow: any order's inf is right
      const double bound = (a_.nranks + 1) * (u * mag + tiny), got = value(c.t, out.data(), i);
      if (std::fabs(got - exact) <= bound) continue;
      if (bad++ == 0) first = i, first_exact = exact, first_bound = bound;
    }
    if (bad)
      std::fprintf(stderr, "%s: %zu of %zu elements off the sum; first [%zu] = %.9g, sum %.9g +- %.3g\n",
                   c.name.c_str(), bad, cnt, first, value(c.t, out.data(), first), first_exact, first_bound);
    return bad == 0;
  }

  // Max ties between +0 and -0 may take either; everything else must be the same bits.
  bool same(const Case& c, const Bytes& out, const Bytes& expect) const {
    if (out.size() != expect.size()) return false;
    if (c.coll != Coll::AllReduceMax || !is_float(c.t)) return out == expect;
    const size_t es = dtype_bytes(c.t);
    for (size_t i = 0; i < out.size() / es; ++i)
      if (std::memcmp(&out[i * es], &expect[i * es], es) != 0 &&
          !(value(c.t, out.data(), i) == 0 && value(c.t, expect.data(), i) == 0))
        return false;
    return true;
  }

  void launch(const Case& c, void* in, void* out) {
    const ncclDataType_t t = nccl_type(c.t);
    const size_t es = dtype_bytes(c.t), cnt = c.count;
    const int n = a_.nranks, r = a_.rank;
    auto at = [](void* p, size_t off) { return static_cast<char*>(p) + off; };
    switch (c.coll) {
      case Coll::AllReduceSum: NCCL_CHECK(ncclAllReduce(in, out, cnt, t, ncclSum, comm_, s_)); break;
      case Coll::AllReduceMax: NCCL_CHECK(ncclAllReduce(in, out, cnt, t, ncclMax, comm_, s_)); break;
      case Coll::AllGather: NCCL_CHECK(ncclAllGather(in, out, cnt, t, comm_, s_)); break;
      case Coll::ReduceScatter: NCCL_CHECK(ncclReduceScatter(in, out, cnt, t, ncclSum, comm_, s_)); break;
      case Coll::Broadcast: NCCL_CHECK(ncclBroadcast(in, out, cnt, t, n - 1, comm_, s_)); break;
      case Coll::Reduce: NCCL_CHECK(ncclReduce(in, out, cnt, t, ncclSum, 0, comm_, s_)); break;
      case Coll::AllToAll:
        NCCL_CHECK(ncclGroupStart());
        for (int j = 0; j < n; ++j) {
          NCCL_CHECK(ncclSend(at(in, size_t(j) * cnt * es), cnt, t, j, comm_, s_));
          NCCL_CHECK(ncclRecv(at(out, size_t(j) * cnt * es), cnt, t, j, comm_, s_));
        }
        NCCL_CHECK(ncclGroupEnd());
        break;
      case Coll::AllToAllV: {
        size_t soff = 0, roff = 0;
        NCCL_CHECK(ncclGroupStart());
        for (int j = 0; j < n; ++j) {
          NCCL_CHECK(ncclSend(at(in, soff * es), vcount(c, r, j), t, j, comm_, s_));
          NCCL_CHECK(ncclRecv(at(out, roff * es), vcount(c, j, r), t, j, comm_, s_));
          soff += vcount(c, r, j);
          roff += vcount(c, j, r);
        }
        NCCL_CHECK(ncclGroupEnd());
        break;
      }
      case Coll::SendRecv:
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(in, cnt, t, (r + 1) % n, comm_, s_));
        NCCL_CHECK(ncclRecv(out, cnt, t, (r + n - 1) % n, comm_, s_));
        NCCL_CHECK(ncclGroupEnd());
        break;
    }
  }

  const Args& a_;
  ncclComm_t comm_;
  cudaStream_t s_;
  const RealPool& pool_;
};

bool parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto val = [&](const char* k) -> const char* {
      const size_t n = std::strlen(k);
      return s.compare(0, n, k) == 0 ? argv[i] + n : nullptr;
    };
    if (auto v = val("--rank=")) a->rank = std::atoi(v);
    else if (auto v = val("--nranks=")) a->nranks = std::atoi(v);
    else if (auto v = val("--device=")) a->device = std::atoi(v);
    else if (auto v = val("--id=")) a->id_file = v;
    else if (auto v = val("--data=")) a->data_dir = v;
    else if (auto v = val("--max-elems=")) a->max_elems = size_t(std::strtoull(v, nullptr, 10));
    else return false;
  }
  return a->nranks >= 2 && a->nranks <= 16 && a->rank >= 0 && a->rank < a->nranks && !a->id_file.empty() &&
         a->max_elems >= 1;
}

// Rank 0 publishes the id by a rename, so a reader never sees half of it.
ncclUniqueId exchange_id(const Args& a) {
  ncclUniqueId id;
  if (a.rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string tmp = a.id_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof id.internal);
    if (std::rename(tmp.c_str(), a.id_file.c_str()) != 0) {
      std::perror("rename");
      std::exit(2);
    }
    return id;
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    std::ifstream f(a.id_file, std::ios::binary);
    if (f && f.read(id.internal, sizeof id.internal)) return id;
    if (std::chrono::steady_clock::now() > end) {
      std::fprintf(stderr, "rank %d: no id in %s after 120 s\n", a.rank, a.id_file.c_str());
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: zipccl-nccl-check --rank=R --nranks=N (2..16) --id=FILE [--data=DIR] [--device=D] "
                 "[--max-elems=E]\n");
    return 2;
  }
  RealPool pool;
  if (!a.data_dir.empty()) {
    std::string err;
    if (!pool.load(a.data_dir, &err)) {
      std::fprintf(stderr, "--data: %s\n", err.c_str());
      return 2;
    }
  }
  CUDA_CHECK(cudaSetDevice(a.device));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, a.nranks, exchange_id(a), a.rank));
  int version = 0;
  NCCL_CHECK(ncclGetVersion(&version));
  Checker checker(a, comm, s, pool);
  int failed = 0;
  const std::vector<Case> cs = cases(a, pool);
  for (const Case& c : cs) {
    bool ok = false, order = false;
    const uint64_t d = checker.run(c, &ok, &order);
    failed += !ok;
    std::printf("CASE %s %016llx ok=%d%s\n", c.name.c_str(), static_cast<unsigned long long>(d), ok ? 1 : 0,
                order ? " order" : "");
  }
  NCCL_CHECK(ncclCommFinalize(comm));
  NCCL_CHECK(ncclCommDestroy(comm));
  CUDA_CHECK(cudaStreamDestroy(s));
  std::printf("RESULT rank=%d ok=%d cases=%zu failed=%d nccl=%d\n", a.rank, failed == 0, cs.size(), failed, version);
  return failed == 0 ? 0 : 1;
}
