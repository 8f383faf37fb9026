// Real training tensors (.safetensors from ZIPCCL_DATA_DIR, set by CTest): every tensor must
// round-trip under its own codec and under classify()'s guess. Skipped when the data is absent.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "test_util.h"

namespace zipccl::test {
namespace {

struct Tensor {
  std::string name;
  Codec codec;
  Bytes data;
};

// Minimal safetensors reader: 8-byte little-endian header length, JSON header, data. Only the
// "dtype" and "data_offsets" of each entry are needed; shapes are irrelevant to a byte codec.
::testing::AssertionResult read_safetensors(const std::string& path, std::vector<Tensor>* out) {
  std::ifstream f(path, std::ios::binary);
  Bytes file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  uint64_t hlen = 0;
  if (file.size() < 8) return ::testing::AssertionFailure() << path << ": too short";
  std::memcpy(&hlen, file.data(), 8);
  if (hlen > file.size() - 8) return ::testing::AssertionFailure() << path << ": bad header length";
  const std::string json(file.begin() + 8, file.begin() + 8 + hlen);
  const size_t data0 = 8 + hlen;
  for (size_t at = json.find("\"dtype\""); at != std::string::npos; at = json.find("\"dtype\"", at + 1)) {
    const size_t open = json.rfind('{', at), close = json.find('}', at);
    const size_t key_end = json.rfind('"', json.rfind(':', open));
    const size_t key_begin = json.rfind('"', key_end - 1);
    const std::string obj = json.substr(open, close - open);
    const size_t dq = obj.find('"', obj.find(':', obj.find("\"dtype\"") + 7)) + 1;
    const std::string dtype = obj.substr(dq, obj.find('"', dq) - dq);
    const size_t offs = obj.find("\"data_offsets\"");
    if (offs == std::string::npos) return ::testing::AssertionFailure() << path << ": entry without data_offsets";
    unsigned long long begin = 0, end = 0;
    if (std::sscanf(obj.c_str() + obj.find('[', offs), "[%llu , %llu]", &begin, &end) != 2 || begin > end ||
        data0 + end > file.size())
      return ::testing::AssertionFailure() << path << ": bad data_offsets";
    Codec c = dtype == "BF16" ? Codec::BF16 : dtype == "F16" ? Codec::FP16 : dtype == "F32" ? Codec::FP32 : Codec::Raw;
    out->push_back({json.substr(key_begin + 1, key_end - key_begin - 1), c,
                    Bytes(file.begin() + data0 + begin, file.begin() + data0 + end)});
  }
  if (out->empty()) return ::testing::AssertionFailure() << path << ": no tensors";
  return ::testing::AssertionSuccess();
}

class RealData : public ::testing::TestWithParam<const char*> {};

TEST_P(RealData, EveryTensorRoundTrips) {
  const char* dir = std::getenv("ZIPCCL_DATA_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "ZIPCCL_DATA_DIR not set";
  const std::string path = std::string(dir) + "/" + GetParam();
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " not found";

  std::vector<Tensor> tensors;
  ASSERT_TRUE(read_safetensors(path, &tensors));
  size_t orig = 0, coded = 0;
  for (const Tensor& t : tensors) {
    ASSERT_NE(t.codec, Codec::Raw) << t.name << ": unexpected dtype";
    Bytes msg;
    ASSERT_TRUE(round_trip(t.codec, t.data, &msg)) << t.name;
    orig += t.data.size();
    coded += msg.size();
    const Codec guess = classify(t.data.data(), t.data.size());
    Bytes guess_msg;
    ASSERT_TRUE(round_trip(guess, t.data, &guess_msg)) << t.name << " as " << codec_name(guess);
    // The guess may differ from the dtype (a half-zero fp32 gradient codes better as bf16), but
    // on large tensors it must not cost more than 2% of the size against the true type.
    if (t.data.size() >= (1u << 16)) {
      EXPECT_LE(guess_msg.size(), msg.size() + t.data.size() / 50) << t.name << " guessed " << codec_name(guess);
    }
  }
  const double ratio = double(coded) / double(orig);
  RecordProperty("ratio", std::to_string(ratio));
  std::printf("%s: %zu tensors, %zu bytes, ratio %.4f\n", GetParam(), tensors.size(), orig, ratio);
  // Regression guard, far from the measured values: real bf16 tensors code well below raw.
  EXPECT_LT(ratio, tensors[0].codec == Codec::BF16 ? 0.80 : 0.95);
}

INSTANTIATE_TEST_SUITE_P(Files, RealData,
                         ::testing::Values("weights_bf16.safetensors", "grads_bf16.safetensors",
                                           "grads_fp32.safetensors", "acts_bf16.safetensors"),
                         [](const auto& info) {
                           std::string s = info.param;
                           return s.substr(0, s.find('.'));
                         });

}  // namespace
}  // namespace zipccl::test
