// The exported tuner tables (ncclTunerPlugin_v5..v2), one implementation: per communicator, each
// collective's cost table against its Simple entries compressed on the path the net plugin is
// configured for (net::path_view) at the ratio NCCL_ZIP_TUNER_RATIO_PCT, the same on every rank:
// NCCL needs every rank to pick alike, so the model reads nothing a rank measures alone (the net
// plugin still sends raw, message by message, what does not compress). Where compression wins, the
// best compressed Simple entry gets its compressed time and so becomes the cheapest; elsewhere
// NCCL's table is left as it is. One INFO line per change of decision. An operator's override
// (NCCL_ZIP_TUNER_FILE) comes first.
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "adapter.h"
#include "cost_model.h"
#include "guarded.h"
#include "log.h"
#include "net.h"
#include "overrides.h"
#include "param.h"
#include "tuner_abi.h"

namespace zipccl::tuner {
namespace {

ZIP_PARAM(tuner_enabled, "NCCL_ZIP_TUNER", 1, 0, 1)
// Wire / input bytes the model assumes for compressed traffic (bf16 gradients: ~70).
ZIP_PARAM(tuner_ratio_pct, "NCCL_ZIP_TUNER_RATIO_PCT", 70, 1, 100)

const char* algo_name(int a) { return a == kAlgoTree ? "tree" : a == kAlgoRing ? "ring" : a == kAlgoPat ? "PAT" : "?"; }

const char* func_name(int f) {
  static const char* const names[] = {"broadcast", "reduce", "all_gather", "reduce_scatter", "all_reduce"};
  return f >= 0 && f < 5 ? names[f] : "collective";
}

struct Context {
  int nranks, nnodes;
  std::mutex mu;  // NCCL may enqueue from several threads of one communicator's group
  std::map<std::pair<int, int>, int> last;  // (collective, log2 of its size) -> compressed algorithm, or -1
};

ncclResult_t init(uint64_t comm_id, size_t nranks, size_t nnodes, ncclDebugLogger_t logger, void** ctx) {
  return guarded("tuner init", [&]() -> ncclResult_t {
    if (logger) set_logger(logger);
    *ctx = new Context{int(nranks), int(nnodes), {}, {}};
    ZIP_INFO(NCCL_INIT, "tuner: communicator %016llx, %zu ranks on %zu nodes%s", (unsigned long long)comm_id, nranks,
             nnodes, tuner_enabled() ? "" : "; NCCL_ZIP_TUNER=0: NCCL's own choices");
    return ncclSuccess;
  });
}

ZIP_STR_PARAM(tuner_file, "NCCL_ZIP_TUNER_FILE")

// NCCL_ZIP_TUNER_FILE's overrides, read once per process; what does not parse is said and skipped.
const std::vector<Override>& overrides() {
  static const std::vector<Override> list = [] {
    std::vector<Override> v;
    if (tuner_file().empty()) return v;
    std::ifstream f(tuner_file());
    if (!f) {
      ZIP_WARN("tuner: cannot read NCCL_ZIP_TUNER_FILE=%s; no overrides", tuner_file().c_str());
      return v;
    }
    std::stringstream text;
    text << f.rdbuf();
    std::vector<std::string> errors;
    v = parse_overrides(text.str(), &errors);
    for (const std::string& e : errors) ZIP_WARN("tuner: %s, %s: skipped", tuner_file().c_str(), e.c_str());
    ZIP_INFO(NCCL_INIT, "tuner: %zu override(s) from %s", v.size(), tuner_file().c_str());
    return v;
  }();
  return list;
}

// What the tuner does with one collective.
struct Pick {
  enum Kind { kNative, kOverride, kCompressed } kind = kNative;
  int algo = -1, proto = -1, channels = -1;
  float us = 0;  // kCompressed: the predicted time
};

Pick pick(Context* c, int func, size_t nbytes, int pipe_ops, int reg_buff, const float* table, int nalgo,
          int nproto) {
  Pick k;
  if (const Override* o = find_override(overrides(), func, nbytes, c->nnodes, c->nranks, pipe_ops, reg_buff)) {
    k.kind = Pick::kOverride;
    k.algo = o->algo;
    k.proto = o->proto;
    k.channels = o->channels;
    return k;
  }
  const net::PathView v = net::path_view();
  Path p;
  p.nranks = c->nranks;
  p.nnodes = c->nnodes;
  p.enabled = v.enabled;
  p.link_bps = v.link_bps;
  p.codec_bps = v.codec_bps;
  p.ratio = double(tuner_ratio_pct()) / 100;
  p.codec_keeps_up = v.codec_keeps_up;
  const Choice ch = choose(func, nbytes, table, nalgo, nproto, p);
  std::lock_guard<std::mutex> g(c->mu);
  const auto key = std::make_pair(func, nbytes ? int(std::log2(double(nbytes))) : 0);
  auto it = c->last.find(key);
  const int decision = ch.compressed ? ch.algo : -1;
  if (it == c->last.end() || it->second != decision) {
    c->last[key] = decision;
    if (ch.compressed)
      ZIP_INFO(NCCL_INIT, "tuner: %s of %zu bytes: %s/Simple compressed, predicted %.1f us against NCCL's %.1f us "
               "(link %.2f GB/s, codec %.2f GB/s, ratio %.3f)", func_name(func), nbytes, algo_name(ch.algo), ch.compressed_us,
               ch.native_us, p.link_bps / 1e9, p.codec_bps / 1e9, p.ratio);
    else
      ZIP_INFO(NCCL_INIT, "tuner: %s of %zu bytes: NCCL's choice (%.1f us; compressed %s)", func_name(func), nbytes,
               ch.native_us, ch.compressed_us > 0 ? "slower" : "does not apply");
  }
  if (!ch.compressed) return k;
  net::expect_compressed();
  k.kind = Pick::kCompressed;
  k.algo = ch.algo;
  k.proto = kProtoSimple;
  k.us = ch.compressed_us;
  return k;
}

// The versions with a cost table: the pick becomes its cheapest entry (an override's: 0, NCCL's
// "prefer"), where the entry applies. Despite its float** type the table is NCCL's
// float[nalgo][nproto] array cast (enqueue.cc), so it is read as one row-major block.
ncclResult_t tune(void* ctx, int func, size_t nbytes, int pipe_ops, int reg_buff, float** cost_table, int nalgo,
                  int nproto, int* nchannels) {
  return guarded("tuner getCollInfo", [&]() -> ncclResult_t {
    auto* c = static_cast<Context*>(ctx);
    float* table = reinterpret_cast<float*>(cost_table);
    if (!c || !table || !tuner_enabled()) return ncclSuccess;
    const Pick k = pick(c, func, nbytes, pipe_ops, reg_buff, table, nalgo, nproto);
    if (k.kind == Pick::kNative || k.algo >= nalgo || k.proto >= nproto) return ncclSuccess;
    float& entry = table[k.algo * nproto + k.proto];
    if (entry < 0) return ncclSuccess;
    entry = k.kind == Pick::kOverride ? 0.0f : k.us;
    if (k.channels > 0 && nchannels) *nchannels = k.channels;
    return ncclSuccess;
  });
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
ncclResult_t coll_info_v5(void* ctx, int func, size_t nbytes, int pipe_ops, float** table, int nalgo, int nproto,
                          int reg_buff, int* nchannels) {
  return tune(ctx, func, nbytes, pipe_ops, reg_buff, table, nalgo, nproto, nchannels);
}
ncclResult_t coll_info_v3(void* ctx, int func, size_t nbytes, int pipe_ops, float** table, int nalgo, int nproto,
                          int* nchannels) {
  return tune(ctx, func, nbytes, pipe_ops, -1, table, nalgo, nproto, nchannels);
}
// v2 has no cost table: NCCL's estimates are unknown, so the plain ring/Simple wire time stands in
// for them (compression then wins where the wire time it saves exceeds the codec's cost).
ncclResult_t coll_info_v2(void* ctx, int func, size_t nbytes, int, int, int pipe_ops, int* algorithm, int* protocol,
                          int* nchannels) {
  return guarded("tuner getCollInfo", [&]() -> ncclResult_t {
    auto* c = static_cast<Context*>(ctx);
    if (!c || !tuner_enabled()) return ncclSuccess;
    float table[2][3] = {{kIgnore, kIgnore, kIgnore}, {kIgnore, kIgnore, kIgnore}};  // tree, ring
    const double link = net::path_view().link_bps;
    if (link > 0) table[kAlgoRing][kProtoSimple] = float(sent_bytes(func, nbytes, c->nranks) / link * 1e6);
    const Pick k = pick(c, func, nbytes, pipe_ops, -1, &table[0][0], 2, 3);
    if (k.kind == Pick::kNative) return ncclSuccess;
    *algorithm = k.algo;
    *protocol = k.proto;
    if (k.channels > 0 && nchannels) *nchannels = k.channels;
    return ncclSuccess;
  });
}

}  // namespace
}  // namespace zipccl::tuner

using namespace zipccl::tuner;

extern "C" {
ZIP_EXPORT ncclTuner_v5_t ncclTunerPlugin_v5 = {"Zip", init_v5, coll_info_v5, finalize};
ZIP_EXPORT ncclTuner_v4_t ncclTunerPlugin_v4 = {"Zip", init_v4, coll_info_v5, finalize};
ZIP_EXPORT ncclTuner_v3_t ncclTunerPlugin_v3 = {"Zip", init_v4, coll_info_v3, finalize};
ZIP_EXPORT ncclTuner_v2_t ncclTunerPlugin_v2 = {"Zip", init_v4, coll_info_v2, finalize};
}
