// Inputs of the NCCL checker (nccl_check.cc), deterministic per case seed and rank, so that every
// rank can rebuild what any other rank sent and compute the exact expected output itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zipccl::check {

enum class DType { BF16, FP16, FP32, INT32, INT8 };
// Gauss: N(0, 0.02^2) in the float types, uniform over the range in the integer ones; Real: the
// training tensors of a data directory (bf16 and fp32 only); Bytes: random bytes (NaNs,
// infinities, denormals), moved but never reduced; Ints: integers in [-8, 8], whose sums over up
// to 16 ranks are exact in every type and in any order.
enum class Fill { Gauss, Real, Bytes, Ints };

using Bytes = std::vector<uint8_t>;

size_t dtype_bytes(DType t);
const char* dtype_name(DType t);
const char* fill_name(Fill f);

// Slices of real tensors, by element type (empty where the directory has none).
struct RealPool {
  Bytes bf16, fp32;
  // Loads every .safetensors file of dir; false with *err where dir has none readable.
  bool load(const std::string& dir, std::string* err);
  bool has(DType t) const { return t == DType::BF16 ? !bf16.empty() : t == DType::FP32 ? !fp32.empty() : false; }
};

// elems values of type t: what `rank` puts in for the case seeded `seed`. Real needs pool.has(t).
Bytes make_input(DType t, Fill f, size_t elems, uint64_t seed, int rank, const RealPool& pool);

// Element i of b as a double (float types) or an integer value (integer types).
double value(DType t, const uint8_t* b, size_t i);
// v, an integer in the type's exact range, as element bits of type t.
void put_int(DType t, uint8_t* b, size_t i, int64_t v);

// FNV-1a over n bytes: the digest a run prints per case, compared across transports.
uint64_t digest(const uint8_t* p, size_t n);

}  // namespace zipccl::check
