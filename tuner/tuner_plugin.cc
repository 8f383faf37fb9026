// The exported tuner tables (ncclTunerPlugin_v5..v2), one implementation: per communicator, each
// collective's cost table against the compressed Simple ring on the path the net plugin sees
// (net::path_view: the same communicator's ratio by its commId for v5, the process's otherwise).
// Where compression wins, the Simple ring's entry gets the compressed time and so becomes the
// cheapest; elsewhere NCCL's table is left as it is. One INFO line per change of decision.
#include <cmath>
#include <map>
#include <mutex>
#include <new>
#include <utility>

#include "cost_model.h"
#include "log.h"
#include "adapter.h"
#include "net.h"
#include "param.h"
#include "tuner_abi.h"

namespace zipccl::tuner {
namespace {

ZIP_PARAM(tuner_enabled, "NCCL_ZIP_TUNER", 1, 0, 1)

const char* func_name(int f) {
  static const char* const names[] = {"broadcast", "reduce", "all_gather", "reduce_scatter", "all_reduce"};
  return f >= 0 && f < 5 ? names[f] : "collective";
}

struct Context {
  uint64_t comm_id;
  int nranks, nnodes;
  std::mutex mu;  // NCCL may enqueue from several threads of one communicator's group
  std::map<std::pair<int, int>, bool> last;  // (collective, log2 of its size) -> compressed
};

ncclResult_t init(uint64_t comm_id, size_t nranks, size_t nnodes, ncclDebugLogger_t logger, void** ctx) {
  if (logger) set_logger(logger);
  *ctx = new (std::nothrow) Context{comm_id, int(nranks), int(nnodes), {}, {}};
  if (!*ctx) return ncclSystemError;
  ZIP_INFO(NCCL_INIT, "tuner: communicator %016llx, %zu ranks on %zu nodes%s", (unsigned long long)comm_id, nranks,
           nnodes, tuner_enabled() ? "" : "; NCCL_ZIP_TUNER=0: NCCL's own choices");
  return ncclSuccess;
}

// The decision for one collective; *compressed says whether it took the compressed ring.
ncclResult_t tune(void* ctx, int func, size_t nbytes, float** table, int nalgo, int nproto, bool* compressed) {
  *compressed = false;
  auto* c = static_cast<Context*>(ctx);
  if (!c || !table || !tuner_enabled()) return ncclSuccess;
  const net::PathView v = net::path_view(c->comm_id);
  Path p;
  p.nranks = c->nranks;
  p.nnodes = c->nnodes;
  p.enabled = v.enabled;
  p.link_bps = v.link_bps;
  p.codec_bps = v.codec_bps;
  p.ratio = v.ratio;
  const Choice ch = choose(func, nbytes, table, nalgo, nproto, p);
  if (ch.compressed) table[kAlgoRing][kProtoSimple] = ch.compressed_us;
  *compressed = ch.compressed;
  std::lock_guard<std::mutex> g(c->mu);
  const auto key = std::make_pair(func, nbytes ? int(std::log2(double(nbytes))) : 0);
  auto it = c->last.find(key);
  if (it != c->last.end() && it->second == ch.compressed) return ncclSuccess;
  c->last[key] = ch.compressed;
  if (ch.compressed)
    ZIP_INFO(NCCL_INIT, "tuner: %s of %zu bytes: ring/Simple compressed, predicted %.1f us against NCCL's %.1f us "
             "(link %.2f GB/s, codec %.2f GB/s, ratio %.3f)", func_name(func), nbytes, ch.compressed_us, ch.native_us,
             p.link_bps / 1e9, p.codec_bps / 1e9, p.ratio);
  else
    ZIP_INFO(NCCL_INIT, "tuner: %s of %zu bytes: NCCL's choice (%.1f us; compressed %s)", func_name(func), nbytes,
             ch.native_us, ch.compressed_us > 0 ? "slower" : "does not apply");
  return ncclSuccess;
}

ncclResult_t finalize(void* ctx) {
  delete static_cast<Context*>(ctx);
  return ncclSuccess;
}

ncclResult_t init_v5(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes, ncclDebugLogger_t logger,
                     ncclNvlDomainInfo_v5_t*, ncclTunerConstants_v5_t*) {
  return init(comm_id, nranks, nnodes, logger, ctx);
}
ncclResult_t init_v4(size_t nranks, size_t nnodes, ncclDebugLogger_t logger, void** ctx) {
  return init(0, nranks, nnodes, logger, ctx);
}
ncclResult_t coll_info_v5(void* ctx, int func, size_t nbytes, int, float** table, int nalgo, int nproto, int,
                          int*) {
  bool compressed;
  return tune(ctx, func, nbytes, table, nalgo, nproto, &compressed);
}
ncclResult_t coll_info_v3(void* ctx, int func, size_t nbytes, int, float** table, int nalgo, int nproto, int*) {
  bool compressed;
  return tune(ctx, func, nbytes, table, nalgo, nproto, &compressed);
}
// v2 has no cost table: NCCL's estimates are unknown, so the ring/Simple time stands in for them
// all (compression then wins where the wire time it saves exceeds the codec's cost).
ncclResult_t coll_info_v2(void* ctx, int func, size_t nbytes, int, int, int, int* algorithm, int* protocol, int*) {
  float row[3] = {kIgnore, kIgnore, kIgnore};
  float ring[3] = {kIgnore, kIgnore, 0};
  float* table[2] = {row, ring};
  auto* c = static_cast<Context*>(ctx);
  if (!c) return ncclSuccess;
  const net::PathView v = net::path_view(c->comm_id);
  if (v.link_bps <= 0) return ncclSuccess;
  const double n = c->nranks > 1 ? c->nranks : 2;
  ring[kProtoSimple] = float(double(nbytes) * (n - 1) / n * (func == kAllReduce ? 2 : 1) / v.link_bps * 1e6);
  bool compressed;
  ncclResult_t r = tune(ctx, func, nbytes, table, 2, 3, &compressed);
  if (r == ncclSuccess && compressed) {
    *algorithm = kAlgoRing;
    *protocol = kProtoSimple;
  }
  return r;
}

}  // namespace
}  // namespace zipccl::tuner

using namespace zipccl::tuner;

extern "C" {
ZIP_EXPORT ncclTuner_v5_t ncclTunerPlugin_v5 = {"Zip", init_v5, coll_info_v5,
                                                                                   finalize};
ZIP_EXPORT ncclTuner_v4_t ncclTunerPlugin_v4 = {"Zip", init_v4, coll_info_v5,
                                                                                   finalize};
ZIP_EXPORT ncclTuner_v3_t ncclTunerPlugin_v3 = {"Zip", init_v4, coll_info_v3,
                                                                                   finalize};
ZIP_EXPORT ncclTuner_v2_t ncclTunerPlugin_v2 = {"Zip", init_v4, coll_info_v2,
                                                                                   finalize};
}
