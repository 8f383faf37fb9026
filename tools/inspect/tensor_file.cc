#include "tensor_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>

#include "zipccl/codec.h"

namespace zipccl::tools {
namespace {

// strchr that does not match the terminating NUL.
bool one_of(char c, const char* set) { return c != 0 && std::strchr(set, c) != nullptr; }

// ---- A small JSON reader, enough for safetensors headers: objects, arrays, strings,
// non-negative integers, and the other literals skipped over. Depth and sizes are bounded. ----

struct Json {
  enum Type { Null, Bool, Int, Other, String, Array, Object } type = Null;
  uint64_t i = 0;     // Int: the value (only non-negative integers are kept exactly)
  std::string s;      // String
  std::vector<Json> items;                           // Array
  std::vector<std::pair<std::string, Json>> fields;  // Object, in file order

  const Json* get(const std::string& key) const {
    for (const auto& f : fields)
      if (f.first == key) return &f.second;
    return nullptr;
  }
};

class JsonParser {
 public:
  JsonParser(const char* p, size_t n) : p_(p), end_(p + n) {}

  bool parse(Json* out, std::string* err) {
    if (!value(out, 0)) {
      *err = "bad JSON at byte " + std::to_string(pos_ - p_) + ": " + why_;
      return false;
    }
    ws();
    if (pos_ != end_) {
      *err = "trailing bytes after JSON at byte " + std::to_string(pos_ - p_);
      return false;
    }
    return true;
  }

 private:
  static constexpr int kMaxDepth = 64;
  const char* p_;
  const char* end_;
  const char* pos_ = p_;
  std::string why_;

  bool fail(const char* why) {
    why_ = why;
    return false;
  }
  void ws() {
    while (pos_ < end_ && (*pos_ == ' ' || *pos_ == '\t' || *pos_ == '\n' || *pos_ == '\r')) ++pos_;
  }
  bool lit(const char* word) {
    size_t n = std::strlen(word);
    if (size_t(end_ - pos_) < n || std::memcmp(pos_, word, n) != 0) return fail("unknown literal");
    pos_ += n;
    return true;
  }

  bool value(Json* v, int depth) {
    if (depth > kMaxDepth) return fail("nesting too deep");
    ws();
    if (pos_ == end_) return fail("unexpected end");
    switch (*pos_) {
      case '{': return object(v, depth);
      case '[': return array(v, depth);
      case '"': v->type = Json::String; return string(&v->s);
      case 't': v->type = Json::Bool; return lit("true");
      case 'f': v->type = Json::Bool; return lit("false");
      case 'n': v->type = Json::Null; return lit("null");
      default: return number(v);
    }
  }

  bool object(Json* v, int depth) {
    v->type = Json::Object;
    ++pos_;
    ws();
    if (pos_ < end_ && *pos_ == '}') return ++pos_, true;
    for (;;) {
      ws();
      std::string key;
      if (pos_ == end_ || *pos_ != '"') return fail("expected a key");
      if (!string(&key)) return false;
      ws();
      if (pos_ == end_ || *pos_ != ':') return fail("expected ':'");
      ++pos_;
      Json item;
      if (!value(&item, depth + 1)) return false;
      v->fields.emplace_back(std::move(key), std::move(item));
      ws();
      if (pos_ == end_) return fail("unterminated object");
      if (*pos_ == '}') return ++pos_, true;
      if (*pos_ != ',') return fail("expected ',' or '}'");
      ++pos_;
    }
  }

  bool array(Json* v, int depth) {
    v->type = Json::Array;
    ++pos_;
    ws();
    if (pos_ < end_ && *pos_ == ']') return ++pos_, true;
    for (;;) {
      Json item;
      if (!value(&item, depth + 1)) return false;
      v->items.push_back(std::move(item));
      ws();
      if (pos_ == end_) return fail("unterminated array");
      if (*pos_ == ']') return ++pos_, true;
      if (*pos_ != ',') return fail("expected ',' or ']'");
      ++pos_;
    }
  }

  // Strings keep escapes other than \" and \\ as written: tensor names are compared, not shown
  // decoded, and \uXXXX only needs to be skipped correctly.
  bool string(std::string* s) {
    ++pos_;
    while (pos_ < end_ && *pos_ != '"') {
      if (static_cast<unsigned char>(*pos_) < 0x20) return fail("control character in string");
      if (*pos_ == '\\') {
        if (++pos_ == end_) break;
        if (*pos_ == 'u') {
          if (end_ - pos_ < 5) break;
          s->append(pos_ - 1, 6);
          pos_ += 5;
          continue;
        }
        if (!one_of(*pos_, "\"\\/bfnrt")) return fail("bad escape");
        if (*pos_ != '"' && *pos_ != '\\') s->push_back('\\');
      }
      s->push_back(*pos_++);
    }
    if (pos_ == end_) return fail("unterminated string");
    ++pos_;
    return true;
  }

  bool number(Json* v) {
    const char* start = pos_;
    bool integer = true;
    uint64_t x = 0;
    if (pos_ < end_ && *pos_ == '-') integer = false, ++pos_;
    if (pos_ == end_ || *pos_ < '0' || *pos_ > '9') return fail("unexpected character");
    for (; pos_ < end_ && *pos_ >= '0' && *pos_ <= '9'; ++pos_) {
      const uint64_t d = uint64_t(*pos_ - '0');
      if (x > (UINT64_MAX - d) / 10) integer = false;  // too large to be an offset or a dimension
      x = x * 10 + d;
    }
    for (; pos_ < end_ && one_of(*pos_, ".eE+-0123456789"); ++pos_) integer = false;
    if (pos_ - start > 64) return fail("number too long");
    v->type = integer ? Json::Int : Json::Other;
    v->i = x;
    return true;
  }
};

bool mul_ok(uint64_t a, uint64_t b, uint64_t* r) { return !__builtin_mul_overflow(a, b, r); }

Codec codec_of_hint(DTypeHint h) {
  switch (h) {
    case DTypeHint::BF16: return Codec::BF16;
    case DTypeHint::FP16: return Codec::FP16;
    case DTypeHint::FP32: return Codec::FP32;
    default: return Codec::Raw;
  }
}

// safetensors dtype -> (element size, codec).
bool safetensors_dtype(const std::string& d, uint32_t* size, Codec* c) {
  static const std::map<std::string, std::pair<uint32_t, Codec>> kTypes = {
      {"BF16", {2, Codec::BF16}}, {"F16", {2, Codec::FP16}},  {"F32", {4, Codec::FP32}},
      {"F64", {8, Codec::Raw}},   {"I64", {8, Codec::Raw}},   {"U64", {8, Codec::Raw}},
      {"I32", {4, Codec::Raw}},   {"U32", {4, Codec::Raw}},   {"I16", {2, Codec::Raw}},
      {"U16", {2, Codec::Raw}},   {"I8", {1, Codec::Raw}},    {"U8", {1, Codec::Raw}},
      {"BOOL", {1, Codec::Raw}},  {"F8_E4M3", {1, Codec::Raw}}, {"F8_E5M2", {1, Codec::Raw}}};
  auto it = kTypes.find(d);
  if (it == kTypes.end()) return false;
  *size = it->second.first;
  *c = it->second.second;
  return true;
}

bool shape_elems(const std::vector<uint64_t>& shape, uint64_t* n) {
  *n = 1;
  for (uint64_t d : shape)
    if (!mul_ok(*n, d, n)) return false;
  return true;
}

}  // namespace

bool parse_dtype_hint(const std::string& s, DTypeHint* out) {
  if (s == "bf16") *out = DTypeHint::BF16;
  else if (s == "fp16") *out = DTypeHint::FP16;
  else if (s == "fp32") *out = DTypeHint::FP32;
  else if (s == "auto") *out = DTypeHint::Auto;
  else return false;
  return true;
}

bool parse_safetensors(const uint8_t* p, size_t n, std::vector<TensorInfo>* out, std::string* err) {
  // The safetensors reference implementation caps the header at 100 MB.
  constexpr uint64_t kMaxHeader = 100'000'000;
  if (n < 8) return *err = "safetensors: file shorter than its 8-byte header length", false;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(p[i]) << (8 * i);
  if (hlen > kMaxHeader) return *err = "safetensors: header length " + std::to_string(hlen) + " is implausible", false;
  if (hlen > n - 8) return *err = "safetensors: truncated header (" + std::to_string(hlen) + " bytes announced, " + std::to_string(n - 8) + " present)", false;

  Json root;
  std::string jerr;
  if (!JsonParser(reinterpret_cast<const char*>(p + 8), hlen).parse(&root, &jerr))
    return *err = "safetensors: " + jerr, false;
  if (root.type != Json::Object) return *err = "safetensors: header is not a JSON object", false;

  const uint64_t data_start = 8 + hlen, data_bytes = n - data_start;
  std::vector<TensorInfo> tensors;
  for (const auto& [name, v] : root.fields) {
    if (name == "__metadata__") continue;
    const std::string where = "safetensors: tensor '" + name + "': ";
    if (v.type != Json::Object) return *err = where + "entry is not an object", false;
    const Json* dt = v.get("dtype");
    const Json* shape = v.get("shape");
    const Json* offs = v.get("data_offsets");
    if (!dt || dt->type != Json::String) return *err = where + "missing string 'dtype'", false;
    if (!shape || shape->type != Json::Array) return *err = where + "missing array 'shape'", false;
    if (!offs || offs->type != Json::Array || offs->items.size() != 2 ||
        offs->items[0].type != Json::Int || offs->items[1].type != Json::Int)
      return *err = where + "'data_offsets' must be two non-negative integers", false;
    TensorInfo t;
    t.name = name;
    t.dtype = dt->s;
    uint32_t esize;
    if (!safetensors_dtype(t.dtype, &esize, &t.codec)) return *err = where + "unknown dtype '" + t.dtype + "'", false;
    for (const Json& d : shape->items) {
      if (d.type != Json::Int) return *err = where + "shape entries must be non-negative integers", false;
      t.shape.push_back(d.i);
    }
    const uint64_t begin = offs->items[0].i, end = offs->items[1].i;
    if (begin > end || end > data_bytes)
      return *err = where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") outside the " + std::to_string(data_bytes) + "-byte data section", false;
    uint64_t elems, bytes;
    if (!shape_elems(t.shape, &elems) || !mul_ok(elems, esize, &bytes) || bytes != end - begin)
      return *err = where + "data_offsets span " + std::to_string(end - begin) + " bytes, dtype x shape disagrees", false;
    t.offset = data_start + begin;
    t.bytes = bytes;
    tensors.push_back(std::move(t));
  }
  *out = std::move(tensors);
  return true;
}

namespace {

// The npy header is a Python dict literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }. This reads exactly that shape of literal.
class PyDictReader {
 public:
  PyDictReader(const char* p, size_t n) : pos_(p), end_(p + n) {}

  bool read(std::string* descr, bool* fortran, std::vector<uint64_t>* shape, std::string* err) {
    bool have_descr = false, have_order = false, have_shape = false;
    ws();
    if (!eat('{')) return *err = "npy: header is not a dict", false;
    for (;;) {
      ws();
      if (eat('}')) break;
      std::string key;
      if (!str(&key)) return *err = "npy: expected a quoted key", false;
      ws();
      if (!eat(':')) return *err = "npy: expected ':'", false;
      ws();
      if (key == "descr") {
        if (!str(descr)) return *err = "npy: 'descr' must be a string (structured dtypes are not supported)", false;
        have_descr = true;
      } else if (key == "fortran_order") {
        if (word("True")) *fortran = true;
        else if (word("False")) *fortran = false;
        else return *err = "npy: 'fortran_order' must be True or False", false;
        have_order = true;
      } else if (key == "shape") {
        if (!tuple(shape)) return *err = "npy: 'shape' must be a tuple of non-negative integers", false;
        have_shape = true;
      } else {
        return *err = "npy: unexpected key '" + key + "'", false;
      }
      ws();
      if (eat('}')) break;
      if (!eat(',')) return *err = "npy: expected ',' or '}'", false;
    }
    if (!have_descr || !have_order || !have_shape) return *err = "npy: header lacks descr, fortran_order or shape", false;
    return true;
  }

 private:
  const char* pos_;
  const char* end_;

  void ws() {
    while (pos_ < end_ && (*pos_ == ' ' || *pos_ == '\t' || *pos_ == '\n')) ++pos_;
  }
  bool eat(char c) {
    if (pos_ < end_ && *pos_ == c) return ++pos_, true;
    return false;
  }
  bool word(const char* w) {
    size_t n = std::strlen(w);
    if (size_t(end_ - pos_) < n || std::memcmp(pos_, w, n) != 0) return false;
    pos_ += n;
    return true;
  }
  bool str(std::string* s) {
    if (pos_ == end_ || (*pos_ != '\'' && *pos_ != '"')) return false;
    const char q = *pos_++;
    const char* start = pos_;
    while (pos_ < end_ && *pos_ != q) ++pos_;
    if (pos_ == end_) return false;
    s->assign(start, pos_++);
    return true;
  }
  bool tuple(std::vector<uint64_t>* shape) {
    if (!eat('(')) return false;
    for (;;) {
      ws();
      if (eat(')')) return true;
      uint64_t x = 0;
      const char* start = pos_;
      for (; pos_ < end_ && *pos_ >= '0' && *pos_ <= '9'; ++pos_)
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, uint64_t(*pos_ - '0'), &x)) return false;
      if (pos_ == start) return false;
      while (pos_ < end_ && *pos_ == 'L') ++pos_;  // Python 2 longs
      shape->push_back(x);
      ws();
      if (eat(')')) return true;
      if (!eat(',')) return false;
    }
  }
};

// Printable ASCII and whitespace throughout the first 4 KiB: what a text file is and what
// binary tensor data practically never is.
bool looks_like_text(const std::vector<uint8_t>& d) {
  const size_t n = d.size() < 4096 ? d.size() : 4096;
  for (size_t i = 0; i < n; ++i)
    if (!((d[i] >= 0x20 && d[i] < 0x7F) || d[i] == '\n' || d[i] == '\r' || d[i] == '\t')) return false;
  return true;
}

}  // namespace

bool parse_npy(const uint8_t* p, size_t n, DTypeHint hint, TensorInfo* out, std::string* err) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (n < 10 || std::memcmp(p, kMagic, 6) != 0) return *err = "npy: bad magic", false;
  const uint8_t major = p[6];
  if (major < 1 || major > 3) return *err = "npy: unsupported version " + std::to_string(major), false;
  uint64_t hlen, hstart;
  if (major == 1) {
    hlen = p[8] | uint64_t(p[9]) << 8;
    hstart = 10;
  } else {
    if (n < 12) return *err = "npy: truncated header", false;
    hlen = p[8] | uint64_t(p[9]) << 8 | uint64_t(p[10]) << 16 | uint64_t(p[11]) << 24;
    hstart = 12;
  }
  if (hlen > n - hstart) return *err = "npy: truncated header", false;

  std::string descr;
  bool fortran = false;
  TensorInfo t;
  if (!PyDictReader(reinterpret_cast<const char*>(p + hstart), hlen).read(&descr, &fortran, &t.shape, err)) return false;
  if (descr.size() < 3) return *err = "npy: unsupported dtype '" + descr + "'", false;
  const char order = descr[0], kind = descr[1];
  uint64_t esize = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    if (descr[i] < '0' || descr[i] > '9' || esize > 1'000'000) return *err = "npy: unsupported dtype '" + descr + "'", false;
    esize = esize * 10 + uint64_t(descr[i] - '0');
  }
  if (esize == 0 || !one_of(order, "<>|=") || !one_of(kind, "fiubcV"))
    return *err = "npy: unsupported dtype '" + descr + "'", false;
  // Fortran order only permutes elements; the compression of a flat stream does not care.
  (void)fortran;
  t.name = "(npy)";
  t.dtype = descr;
  const bool little = order == '<' || order == '|' || order == '=';
  if (little && kind == 'f' && esize == 2) t.codec = Codec::FP16;
  if (little && kind == 'f' && esize == 4) t.codec = Codec::FP32;
  if (kind == 'V' && esize == 2) t.codec = Codec::BF16;
  const Codec forced = codec_of_hint(hint);
  if (forced != Codec::Raw && little && esize == geometry(forced).elem_bytes) t.codec = forced;

  uint64_t elems;
  if (!shape_elems(t.shape, &elems) || !mul_ok(elems, esize, &t.bytes))
    return *err = "npy: shape overflows", false;
  t.offset = hstart + hlen;
  if (t.bytes > n - t.offset)
    return *err = "npy: truncated data (" + std::to_string(t.bytes) + " bytes announced, " +
                  std::to_string(n - t.offset) + " present)", false;
  *out = std::move(t);
  return true;
}

bool load_tensor_file(const std::string& path, DTypeHint hint, TensorFile* out, std::string* err) {
  // Regular files only: a directory's size is not its contents, and opening a FIFO waits for a
  // writer that may never come.
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return *err = path + ": cannot open: " + std::strerror(errno), false;
  if (S_ISDIR(st.st_mode)) return *err = path + ": is a directory", false;
  if (!S_ISREG(st.st_mode)) return *err = path + ": not a regular file", false;
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return *err = path + ": cannot open", false;
  const std::streamoff size = f.tellg();
  if (size < 0) return *err = path + ": cannot read", false;
  TensorFile tf;
  tf.path = path;
  tf.data.resize(size_t(size));
  f.seekg(0);
  if (size > 0 && !f.read(reinterpret_cast<char*>(tf.data.data()), size)) return *err = path + ": read error", false;

  auto ends_with = [&](const char* s) {
    const size_t k = std::strlen(s);
    return path.size() >= k && path.compare(path.size() - k, k, s) == 0;
  };
  bool ok = true;
  if (ends_with(".safetensors")) {
    ok = parse_safetensors(tf.data.data(), tf.data.size(), &tf.tensors, err);
  } else if (ends_with(".npy")) {
    tf.tensors.emplace_back();
    ok = parse_npy(tf.data.data(), tf.data.size(), hint, &tf.tensors[0], err);
  } else {
    // Raw bytes: nothing in the file says what it holds, so refuse what cannot be a tensor
    // unless the user says it is one.
    if (tf.data.empty()) return *err = path + ": empty file", false;
    if (hint == DTypeHint::None && looks_like_text(tf.data))
      return *err = path + ": looks like text, not tensor data (--dtype reads it as raw values anyway)", false;
    TensorInfo t;
    t.name = "(raw)";
    t.bytes = tf.data.size();
    t.codec = codec_of_hint(hint);
    if (t.codec == Codec::Raw) t.codec = classify(tf.data.data(), tf.data.size());
    t.dtype = hint == DTypeHint::None || hint == DTypeHint::Auto ? std::string("auto:") + codec_name(t.codec) : codec_name(t.codec);
    const uint32_t es = geometry(t.codec).elem_bytes;
    t.shape = {t.bytes / es};
    tf.tensors.push_back(std::move(t));
  }
  if (!ok) {
    *err = path + ": " + *err;
    return false;
  }
  *out = std::move(tf);
  return true;
}

}  // namespace zipccl::tools
