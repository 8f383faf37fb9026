// The ring's job words (zipccl/service_protocol.h): what service_post() writes is what the kernel
// and the emulated service read back, every word carries the job's tag, and a word left from the
// slot's last job is told apart.
#include <gtest/gtest.h>

#include <memory>

#include "zipccl/service_protocol.h"

namespace zipccl::gpu {
namespace {

ServiceJob sample(uint64_t in_bytes, uint64_t out_cap, uint64_t limit) {
  ServiceJob j{};
  j.in = reinterpret_cast<const void*>(uintptr_t(0x7f0012345670));
  j.in_bytes = in_bytes;
  j.out = reinterpret_cast<void*>(uintptr_t(0xfedcba9876543210));
  j.out_cap = out_cap;
  j.limit = limit;
  j.op = kServiceDecode;
  j.codec = 3;
  j.auto_codec = 1;
  j.checksum = 0;
  j.raw_header_only = 1;
  j.in_host = 1;
  return j;
}

void expect_same(const ServiceJob& a, const ServiceJob& b) {
  EXPECT_EQ(a.in, b.in);
  EXPECT_EQ(a.in_bytes, b.in_bytes);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out_cap, b.out_cap);
  EXPECT_EQ(a.limit, b.limit);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.codec, b.codec);
  EXPECT_EQ(a.auto_codec, b.auto_codec);
  EXPECT_EQ(a.checksum, b.checksum);
  EXPECT_EQ(a.raw_header_only, b.raw_header_only);
  EXPECT_EQ(a.in_host, b.in_host);
}

TEST(ServiceProtocol, APostedJobReadsBackWithItsTagInEveryWord) {
  auto host = std::make_unique<ServiceHost>();
  const uint64_t index = 5 * kServiceRing + 17;
  const ServiceJob j = sample(123457, 654321, 99999);
  service_post(host.get(), index, j);
  const PostedJob& p = host->jobs[index % kServiceRing];
  for (int i = 0; i < kPostedWords; ++i) EXPECT_EQ(uint32_t(p.word[i] >> 32), uint32_t(index + 1)) << "word " << i;
  EXPECT_TRUE(tagged(p, service_tag(index)));
  expect_same(unposted(p), j);
  EXPECT_EQ(host->tail, index + 1);
  ServiceJob flags = j;  // each flag alone, and a flag byte other than 1 read as set
  for (uint8_t ServiceJob::*f :
       {&ServiceJob::auto_codec, &ServiceJob::checksum, &ServiceJob::raw_header_only, &ServiceJob::in_host}) {
    flags.auto_codec = flags.checksum = flags.raw_header_only = flags.in_host = 0;
    flags.*f = 7;
    const ServiceJob r = unposted(posted(flags, 1));
    EXPECT_EQ(r.*f, 1);
    EXPECT_EQ(r.auto_codec + r.checksum + r.raw_header_only + r.in_host, 1);
  }
}

TEST(ServiceProtocol, TheSlotsLastJobIsNotTakenForTheNext) {
  auto host = std::make_unique<ServiceHost>();
  const uint64_t index = 3 * kServiceRing + 4;
  service_post(host.get(), index - kServiceRing, sample(1, 2, 3));
  const PostedJob& p = host->jobs[index % kServiceRing];
  EXPECT_FALSE(tagged(p, service_tag(index)));
  for (int i = 0; i < kPostedWords; ++i) {  // all words but one rewritten
    PostedJob part = posted(sample(1, 2, 3), service_tag(index));
    part.word[i] = p.word[i];
    EXPECT_FALSE(tagged(part, service_tag(index))) << "word " << i << " left from the slot's last job";
  }
  EXPECT_FALSE(tagged(PostedJob{}, service_tag(0))) << "a zeroed ring holds no job";
  service_post(host.get(), index, sample(1, 2, 3));
  EXPECT_TRUE(tagged(p, service_tag(index)));
}

TEST(ServiceProtocol, SizesPast32BitsStayPastTheLargestJob) {
  auto host = std::make_unique<ServiceHost>();
  service_post(host.get(), 0, sample(uint64_t(5) << 32, uint64_t(1) << 40, ~uint64_t(0)));
  const ServiceJob r = unposted(host->jobs[0]);
  EXPECT_EQ(r.in_bytes, 0xFFFFFFFFull);
  EXPECT_EQ(r.out_cap, 0xFFFFFFFFull);
  EXPECT_EQ(r.limit, 0xFFFFFFFFull);
  EXPECT_GT(r.in_bytes, kServiceMaxJob);
  service_post(host.get(), 1, sample(kServiceMaxJob, kServiceMaxJob + 1, 0));
  EXPECT_EQ(unposted(host->jobs[1]).in_bytes, kServiceMaxJob);
  EXPECT_EQ(unposted(host->jobs[1]).out_cap, kServiceMaxJob + 1);
}

}  // namespace
}  // namespace zipccl::gpu
