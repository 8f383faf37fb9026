#include "ib_errors.h"

namespace zipccl::verbs {
namespace {

const char* hint(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return "the peer is down or unreachable (network problem), or NCCL_IB_TIMEOUT is too short";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "the peer stopped posting receives (it is stuck or gone)";
    case IBV_WC_REM_ACCESS_ERR: return "the peer refused the remote key or permissions (stale or wrong rkey)";
    case IBV_WC_REM_INV_REQ_ERR: return "the peer found the request invalid (length or queue pair state)";
    case IBV_WC_REM_OP_ERR: return "the peer could not complete the operation";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error: a buffer outside its registration (with GPU memory often ACS)";
    case IBV_WC_LOC_LEN_ERR: return "a receive buffer was too small for what arrived";
    case IBV_WC_WR_FLUSH_ERR: return "flushed: the queue pair had already failed";
    default: return "";
  }
}

}  // namespace

std::string describe_completion_error(const IbvFunctions& fn, const ibv_wc& wc) {
  std::string s = std::string(fn.wc_status_str(wc.status)) + " (status " + std::to_string(int(wc.status)) +
                  ", opcode " + std::to_string(int(wc.opcode)) + ", vendor error " +
                  std::to_string(wc.vendor_err) + ", qp " + std::to_string(wc.qp_num) + ")";
  const char* h = hint(wc.status);
  if (*h) s += ": " + std::string(h);
  return s;
}

ncclResult_t completion_error_code(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_LOC_EEC_OP_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_MW_BIND_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_LOC_RDD_VIOL_ERR:
    case IBV_WC_FATAL_ERR:
    case IBV_WC_GENERAL_ERR:
      return ncclSystemError;
    default:
      return ncclRemoteError;
  }
}

}  // namespace zipccl::verbs
