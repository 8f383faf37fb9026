// Logging through the logger NCCL hands to init(): lines appear in NCCL's own log, filtered by
// NCCL_DEBUG / NCCL_DEBUG_SUBSYS. Before init (or if NCCL passes none) nothing is printed.
#pragma once

#include "nccl_types.h"

namespace zipccl {

void set_logger(ncclDebugLogger_t logger);
ncclDebugLogger_t logger();

}  // namespace zipccl

#define ZIP_LOG(level, flags, fmt, ...)                                              \
  do {                                                                               \
    ncclDebugLogger_t zip_logger_ = ::zipccl::logger();                                 \
    if (zip_logger_) zip_logger_(level, flags, __FILE__, __LINE__, "NET/Zip : " fmt, ##__VA_ARGS__); \
  } while (0)
#define ZIP_WARN(fmt, ...) ZIP_LOG(NCCL_LOG_WARN, NCCL_NET, fmt, ##__VA_ARGS__)
#define ZIP_INFO(flags, fmt, ...) ZIP_LOG(NCCL_LOG_INFO, flags, fmt, ##__VA_ARGS__)
#define ZIP_TRACE(fmt, ...) ZIP_LOG(NCCL_LOG_TRACE, NCCL_NET, fmt, ##__VA_ARGS__)
