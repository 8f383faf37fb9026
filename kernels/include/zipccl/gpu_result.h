// What the GPU codec reports per message, in memory the host polls (pinned) or the device's.
// No CUDA header: host code that only reads results needs none.
#pragma once

#include <cstdint>

namespace zipccl::gpu {

// Written by the device once an item is complete.
struct Result {
  uint64_t bytes;          // encode: message length; decode: decoded length; 0 on error
  int32_t status;          // a zipccl::Status value
  uint8_t codec;           // codec of the message emitted (encode) or read (decode)
  uint8_t raw_from_input;  // encode with raw_header_only: only the 128-byte Raw header was
                           // written; the payload is the input itself, verbatim
  uint8_t small_tiles;     // encode: 1 where the resident kernel, idle, coded it alone in tiles of
                           // kServiceSmallTile bytes, which spend more CTA time per byte
  uint8_t done;  // set to 1 last, after the fields above are visible to the host;
                 // a host that cleared it before the launch may poll it (volatile read)
};
static_assert(sizeof(Result) == 16, "Result is 16 bytes");

}  // namespace zipccl::gpu
