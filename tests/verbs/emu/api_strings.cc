// The two string verbs, with rdma-core's texts (a test compares them when rdma-core is
// installed).
#include "api.h"

ZIP_EMU_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kText[] = {
      "success",
      "local length error",
      "local QP operation error",
      "local EE context operation error",
      "local protection error",
      "Work Request Flushed Error",
      "memory management operation error",
      "bad response error",
      "local access error",
      "remote invalid request error",
      "remote access error",
      "remote operation error",
      "transport retry counter exceeded",
      "RNR retry counter exceeded",
      "local RDD violation error",
      "remote invalid RD request",
      "aborted error",
      "invalid EE context number",
      "invalid EE context state",
      "fatal error",
      "response timeout error",
      "general error",
      "TM error",
      "TM software rendezvous",
  };
  unsigned i = static_cast<unsigned>(status);
  return i < sizeof(kText) / sizeof(kText[0]) ? kText[i] : "unknown";
}

ZIP_EMU_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kText[] = {
      "CQ error",
      "local work queue catastrophic error",
      "invalid request local work queue error",
      "local access violation work queue error",
      "communication established",
      "send queue drained",
      "path migrated",
      "path migration request error",
      "local catastrophic error",
      "port active",
      "port error",
      "LID change",
      "P_Key change",
      "SM change",
      "SRQ catastrophic error",
      "SRQ limit reached",
      "last WQE reached",
      "client reregistration",
      "GID table change",
      "WQ fatal",
  };
  unsigned i = static_cast<unsigned>(event);
  return i < sizeof(kText) / sizeof(kText[0]) ? kText[i] : "unknown";
}
