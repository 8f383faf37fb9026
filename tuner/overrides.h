// Operators' overrides of the tuner, in the CSV format of NCCL's example tuner so that an existing
// NCCL_TUNER_CONFIG_FILE serves as it is (NCCL_ZIP_TUNER_FILE names it):
//   collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps,regBuff]
// collective: broadcast reduce allgather reducescatter allreduce; algorithm: tree ring
// collnet_direct collnet_chain nvls nvls_tree pat; protocol: ll ll128 simple; channels, nNodes,
// nRanks, numPipeOps, regBuff: -1 for any (channels: NCCL's). '#' starts a comment. The first line
// that matches a collective wins over the model.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace zipccl::tuner {

struct Override {
  int func;
  size_t min_bytes, max_bytes;
  int algo, proto, channels;
  int nnodes, nranks, pipe_ops, reg_buff;  // -1: any
};

// The overrides in `text`; each line that does not parse is skipped and described in *errors.
std::vector<Override> parse_overrides(const std::string& text, std::vector<std::string>* errors);

// The first override for this collective, or null.
const Override* find_override(const std::vector<Override>& list, int func, size_t nbytes, int nnodes, int nranks,
                              int pipe_ops, int reg_buff);

}  // namespace zipccl::tuner
