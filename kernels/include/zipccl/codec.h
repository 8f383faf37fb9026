// CPU reference codec for the format of docs/FORMAT.md. The GPU codec must match its output
// byte for byte. Thread-safe: no global state.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zipccl/format.h"

namespace zipccl {

const char* status_string(Status s);

struct EncodeOptions {
  bool checksum = false;  // store CRC32C of the original bytes
  // Emit a raw message when the coded message would exceed max_ratio * input + 128 bytes (the
  // header): see coded_limit() in format.h. Clamped to [0, 1].
  double max_ratio = 1.0;
};

// Encode nbytes at in as codec c into out (capacity out_cap >= max_compressed_bytes(nbytes)
// guarantees success). Falls back to a Raw message when coding does not pay. *out_bytes gets
// the message length.
Status encode(Codec c, const void* in, size_t nbytes, void* out, size_t out_cap, size_t* out_bytes,
              const EncodeOptions& opt = {});

// Validate a message header against the layout it implies. On success *L describes the
// message and *esc_bytes its escape section. in_bytes is how many bytes are available.
Status parse_header(const void* in, size_t in_bytes, Layout* L, Header* h);

// Original size of a message, after header validation.
Status decoded_size(const void* in, size_t in_bytes, size_t* orig_bytes);

// Decode a message (untrusted) into out. Never reads past in+in_bytes nor writes past
// out+out_cap; any inconsistency is an error.
Status decode(const void* in, size_t in_bytes, void* out, size_t out_cap, size_t* out_bytes);

// Guess the element type of an untyped buffer from a sample of its bytes. A wrong guess costs
// ratio, never correctness.
Codec classify(const void* in, size_t nbytes);

// CRC32C (Castagnoli), as stored in the header checksum field.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

const char* codec_name(Codec c);

}  // namespace zipccl
