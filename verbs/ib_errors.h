// Failed work completions explained: the status by name, what NCCL's hints say it usually means,
// and whether the peer (ncclRemoteError) or this host (ncclSystemError) is the likely cause.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "ibv_loader.h"
#include "nccl_types.h"

namespace zipccl::verbs {

std::string describe_completion_error(const IbvFunctions& fn, const ibv_wc& wc);
ncclResult_t completion_error_code(ibv_wc_status status);

}  // namespace zipccl::verbs
