// Readers for the tensor containers zipccl-inspect understands: .safetensors, .npy and raw
// files. Every parser works on an in-memory buffer, treats it as untrusted, and reports a
// reason instead of crashing on malformed input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zipccl/format.h"

namespace zipccl::tools {

struct TensorInfo {
  std::string name;
  std::string dtype;            // as the file spells it ("BF16", "<f4", ...)
  Codec codec = Codec::Raw;     // codec for the dtype; Raw when zipccl has none for it
  std::vector<uint64_t> shape;
  uint64_t offset = 0;          // byte offset of the data in the buffer
  uint64_t bytes = 0;
};

// The element type a raw file (or an ambiguous .npy) is read as; Auto asks classify().
enum class DTypeHint { None, Auto, BF16, FP16, FP32 };

// Parse "bf16" | "fp16" | "fp32" | "auto"; false for anything else.
bool parse_dtype_hint(const std::string& s, DTypeHint* out);

// safetensors: 8-byte little-endian header length, JSON object of
// name -> {dtype, shape, data_offsets}, then the data. Offsets must lie in the data section and
// agree with dtype x shape.
bool parse_safetensors(const uint8_t* p, size_t n, std::vector<TensorInfo>* out, std::string* err);

// npy v1/v2/v3, little-endian or byte-sized dtypes, C order. bf16 is not a numpy dtype: '<V2'
// or '|V2' is read as bf16, and `hint` (when not None/Auto) overrides any 2- or 4-byte dtype.
bool parse_npy(const uint8_t* p, size_t n, DTypeHint hint, TensorInfo* out, std::string* err);

// A whole file: the container is chosen by extension (.safetensors, .npy), anything else is a
// single raw tensor read as `hint` (Auto when None).
struct TensorFile {
  std::string path;
  std::vector<uint8_t> data;
  std::vector<TensorInfo> tensors;
};
bool load_tensor_file(const std::string& path, DTypeHint hint, TensorFile* out, std::string* err);

}  // namespace zipccl::tools
