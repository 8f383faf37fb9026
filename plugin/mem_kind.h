// Where a registered buffer lives. The plugin does not link CUDA: if the process has already
// loaded the CUDA runtime, its cudaPointerGetAttributes is used; otherwise memory is host memory.
#pragma once

#include "codec_engine.h"

namespace zip {

MemKind memory_kind(const void* p);

}  // namespace zip
