// NCCL_ZIP_TUNER_FILE: NCCL's example tuner format parsed as NCCL reads it, bad lines reported by
// number and skipped, the first matching line chosen.
#include "overrides.h"

#include <gtest/gtest.h>

#include "tuner_abi.h"

namespace zipccl::tuner {
namespace {

// Lines of NCCL's plugins/tuner/example/nccl_tuner.conf, comments and blanks included.
const char* const kNcclExample = R"(# NCCL Tuner Configuration File (CSV Format)
allreduce,0,65536,tree,simple,2,1,-1,-1,1

allreduce,65537,1048576,ring,simple,4,4,32,1,0
allreduce,1048577,4294967295,ring,ll128,-1,-1,-1,4,-1
allgather,0,4294967295,ring,simple,4,2,-1
reducescatter , 0 , 131072 , tree , simple , 2 , 1 , -1 , 1 , 1   # spaces and a trailing comment
)";

TEST(TunerOverrides, ReadsNcclsExampleFormat) {
  std::vector<std::string> errors;
  const auto list = parse_overrides(kNcclExample, &errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  ASSERT_EQ(list.size(), 5u);
  EXPECT_EQ(list[0].func, kAllReduce);
  EXPECT_EQ(list[0].algo, kAlgoTree);
  EXPECT_EQ(list[0].proto, kProtoSimple);
  EXPECT_EQ(list[0].channels, 2);
  EXPECT_EQ(list[0].nnodes, 1);
  EXPECT_EQ(list[0].reg_buff, 1);
  EXPECT_EQ(list[2].proto, kProtoLL128);
  EXPECT_EQ(list[2].max_bytes, 4294967295u);
  EXPECT_EQ(list[3].func, kAllGather);
  EXPECT_EQ(list[3].pipe_ops, -1) << "8 fields: any pipeline count and buffer";
  EXPECT_EQ(list[4].func, kReduceScatter);
  EXPECT_EQ(list[4].max_bytes, 131072u);
}

TEST(TunerOverrides, BadLinesAreNamedAndSkipped) {
  std::vector<std::string> errors;
  const auto list = parse_overrides(
      "allreduce,0,10,ring,simple,-1,-1,-1\n"   // good
      "alltoall,0,10,ring,simple,-1,-1,-1\n"    // 2: collective
      "allreduce,0,10,bus,simple,-1,-1,-1\n"    // 3: algorithm
      "allreduce,0,10,ring,fast,-1,-1,-1\n"     // 4: protocol
      "allreduce,10,0,ring,simple,-1,-1,-1\n"   // 5: sizes
      "allreduce,0,1k,ring,simple,-1,-1,-1\n"   // 6: not a number
      "allreduce,0,10,ring,simple,-1,-1\n",     // 7: fields
      &errors);
  EXPECT_EQ(list.size(), 1u);
  ASSERT_EQ(errors.size(), 6u);
  EXPECT_NE(errors[0].find("line 2: unknown collective 'alltoall'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("line 3: unknown algorithm"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("line 4: unknown protocol"), std::string::npos) << errors[2];
  EXPECT_NE(errors[3].find("line 5:"), std::string::npos) << errors[3];
  EXPECT_NE(errors[4].find("line 6:"), std::string::npos) << errors[4];
  EXPECT_NE(errors[5].find("line 7: expected 8 or 10 fields, found 7"), std::string::npos) << errors[5];
}

TEST(TunerOverrides, FirstMatchWins) {
  std::vector<std::string> errors;
  const auto list = parse_overrides(kNcclExample, &errors);
  const Override* o = find_override(list, kAllReduce, 4096, 1, 8, 1, 1);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->algo, kAlgoTree);
  EXPECT_EQ(find_override(list, kAllReduce, 4096, 1, 8, 1, 0), nullptr) << "regBuff 1 only";
  o = find_override(list, kAllReduce, 1 << 20, 4, 32, 1, 0);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->channels, 4);
  EXPECT_EQ(find_override(list, kAllReduce, 1 << 20, 4, 16, 1, 0), nullptr) << "32 ranks only";
  o = find_override(list, kAllGather, size_t(1) << 30, 2, 64, 7, 1);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->proto, kProtoSimple);
  EXPECT_EQ(find_override(list, kAllGather, size_t(1) << 30, 3, 64, 7, 1), nullptr) << "2 nodes only";
  EXPECT_EQ(find_override(list, kBroadcast, 10, 1, 8, 1, 1), nullptr);
}

}  // namespace
}  // namespace zipccl::tuner
