#include "check_data.h"

#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "fp16.h"
#include "synth.h"
#include "tensor_file.h"

namespace zipccl::check {

size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::BF16:
    case DType::FP16: return 2;
    case DType::FP32:
    case DType::INT32: return 4;
    case DType::INT8: return 1;
  }
  return 1;
}

const char* dtype_name(DType t) {
  static const char* const n[] = {"bf16", "fp16", "fp32", "int32", "int8"};
  return n[int(t)];
}

const char* fill_name(Fill f) {
  static const char* const n[] = {"gauss", "real", "bytes", "ints"};
  return n[int(f)];
}

bool RealPool::load(const std::string& dir, std::string* err) {
  DIR* d = opendir(dir.c_str());
  if (!d) {
    *err = "cannot open " + dir;
    return false;
  }
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) files.push_back(dir + "/" + n);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    tools::TensorFile tf;
    std::string e;
    if (!tools::load_tensor_file(f, tools::DTypeHint::None, &tf, &e)) {
      *err = f + ": " + e;
      return false;
    }
    for (const tools::TensorInfo& t : tf.tensors) {
      Bytes* to = t.codec == Codec::BF16 ? &bf16 : t.codec == Codec::FP32 ? &fp32 : nullptr;
      if (to) to->insert(to->end(), tf.data.begin() + long(t.offset), tf.data.begin() + long(t.offset + t.bytes));
    }
  }
  if (bf16.empty() && fp32.empty()) {
    *err = "no bf16 or fp32 tensors in " + dir;
    return false;
  }
  return true;
}

namespace {

uint64_t mix(uint64_t seed, int rank) { return seed * 0x9E3779B97F4A7C15ull + uint64_t(rank) * 0xBF58476D1CE4E5B9ull + 1; }

}  // namespace

Bytes make_input(DType t, Fill f, size_t elems, uint64_t seed, int rank, const RealPool& pool) {
  const size_t es = dtype_bytes(t);
  const uint64_t s = mix(seed, rank);
  std::mt19937_64 g(s);
  Bytes b(elems * es);
  switch (f) {
    case Fill::Gauss:
      if (t == DType::BF16 || t == DType::FP16 || t == DType::FP32) {
        const Codec c = t == DType::BF16 ? Codec::BF16 : t == DType::FP16 ? Codec::FP16 : Codec::FP32;
        return tools::synth(c, tools::Dist::Gaussian, 0.02, elems, s);
      }
      for (uint8_t& x : b) x = uint8_t(g());
      return b;
    case Fill::Real: {
      const Bytes& src = t == DType::BF16 ? pool.bf16 : pool.fp32;
      const size_t n = src.size() / es;  // a window of the pool, wrapping, per seed and rank
      size_t at = size_t(s % n);
      for (size_t i = 0; i < elems; ++i, at = at + 1 == n ? 0 : at + 1) std::memcpy(&b[i * es], &src[at * es], es);
      return b;
    }
    case Fill::Bytes:
      for (uint8_t& x : b) x = uint8_t(g());
      return b;
    case Fill::Ints:
      for (size_t i = 0; i < elems; ++i) put_int(t, b.data(), i, int64_t(g() % 17) - 8);
      return b;
  }
  return b;
}

double value(DType t, const uint8_t* b, size_t i) {
  switch (t) {
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, b + 2 * i, 2);
      const uint32_t u = uint32_t(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::FP16: {
      uint16_t h;
      std::memcpy(&h, b + 2 * i, 2);
      return tools::fp16_to_double(h);
    }
    case DType::FP32: {
      float f;
      std::memcpy(&f, b + 4 * i, 4);
      return f;
    }
    case DType::INT32: {
      int32_t v;
      std::memcpy(&v, b + 4 * i, 4);
      return v;
    }
    case DType::INT8: return int8_t(b[i]);
  }
  return 0;
}

void put_int(DType t, uint8_t* b, size_t i, int64_t v) {
  switch (t) {
    case DType::BF16: {
      const float f = float(v);  // small integers: exact, the low half zero
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint16_t h = uint16_t(u >> 16);
      std::memcpy(b + 2 * i, &h, 2);
      return;
    }
    case DType::FP16: {
      const uint16_t h = tools::float_to_fp16(float(v));
      std::memcpy(b + 2 * i, &h, 2);
      return;
    }
    case DType::FP32: {
      const float f = float(v);
      std::memcpy(b + 4 * i, &f, 4);
      return;
    }
    case DType::INT32: {
      const int32_t x = int32_t(v);
      std::memcpy(b + 4 * i, &x, 4);
      return;
    }
    case DType::INT8: b[i] = uint8_t(int8_t(v)); return;
  }
}

uint64_t digest(const uint8_t* p, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

}  // namespace zipccl::check
