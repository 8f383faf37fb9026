#include "engine_params.h"

#include "log.h"

namespace zipccl {

ZipMode zip_mode() {
  static const ZipMode m = static_cast<ZipMode>(env_int("NCCL_ZIP_ENABLE", 1, 0, 2));
  return m;
}

TransportKind transport_kind() {
  static const TransportKind k = [] {
    const std::string s = env_str("NCCL_ZIP_TRANSPORT");
    if (s.empty() || s == "auto") return TransportKind::kAuto;
    if (s == "socket") return TransportKind::kSocket;
    if (s == "ib") return TransportKind::kIb;
    ZIP_WARN("ignoring NCCL_ZIP_TRANSPORT=%s (expected ib, socket or auto), using auto", s.c_str());
    return TransportKind::kAuto;
  }();
  return k;
}

double max_ratio() {
  static const double r = double(env_int("NCCL_ZIP_MAX_RATIO_PCT", 95, 1, 100)) / 100.0;
  return r;
}

}  // namespace zipccl
