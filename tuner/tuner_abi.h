// NCCL's tuner plugin tables v2..v5, as NCCL 2.28 declares them (src/include/plugin/tuner/), and
// the algorithm and protocol indices of its cost table, written here so that the plugin builds
// without NCCL's headers. NCCL looks for ncclTunerPlugin_v5, then v4, v3, v2, in the net plugin's
// library when NCCL_TUNER_PLUGIN is unset.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_types.h"

namespace zipccl::tuner {

// ncclFunc_t values of the collectives the tuner considers.
enum Func : int { kBroadcast = 0, kReduce = 1, kAllGather = 2, kReduceScatter = 3, kAllReduce = 4 };
constexpr int kAlgoTree = 0, kAlgoRing = 1, kAlgoPat = 6;
constexpr int kProtoLL = 0, kProtoLL128 = 1, kProtoSimple = 2;
constexpr float kIgnore = -1.0f;  // NCCL_ALGO_PROTO_IGNORE: an entry that does not apply

}  // namespace zipccl::tuner

extern "C" {

typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;
struct ncclTunerConstants_v5_t;  // NCCL's cost-model constants: left as they are

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v5_t* nvlDomainInfo, ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int collNetSupport, int nvlsSupport,
                              int numPipeOps, int* algorithm, int* protocol, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v2_t;

}  // extern "C"
