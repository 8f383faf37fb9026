// A send comm's share of its device's LinkBacklog: a raw message counts its bytes from its isend
// until test() finds it through the link, a coded one the ratio expected until its encode says how
// many, then those; a comm closed with messages still on the link takes its bytes back.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "bf16_data.h"
#include "link_backlog.h"
#include "net_context.h"
#include "registration.h"
#include "send_comm.h"

namespace zipccl {
namespace {

using Clock = std::chrono::steady_clock;

// The receiver's clear-to-sends as the test queues them; every message posted stays on the link
// until the test lets it through.
class FakeLink : public Link {
 public:
  ncclResult_t post_cts(const ClearToSend&) override { return ncclInternalError; }
  ncclResult_t poll_arrival(MessageHeader*, bool*) override { return ncclInternalError; }
  ncclResult_t poll_cts(ClearToSend* cts, bool* got) override {
    *got = !cts_.empty();
    if (*got) {
      *cts = cts_.front();
      cts_.pop_front();
    }
    return ncclSuccess;
  }
  ncclResult_t post_message(const MessageHeader& h, const Placement&, const void*, Xfer* x) override {
    x->pending.store(1);
    posted_.push_back({h, x});
    return ncclSuccess;
  }
  ncclResult_t progress() override { return ncclSuccess; }
  ncclResult_t error() const override { return ncclSuccess; }
  std::string error_text() const override { return ""; }
  bool peer_closed() const override { return false; }
  std::string peer() const override { return "fake"; }

  struct Posted {
    MessageHeader h;
    Xfer* x;
  };
  std::deque<ClearToSend> cts_;
  std::vector<Posted> posted_;
};

class SendBacklog : public ::testing::Test {
 protected:
  static constexpr int kDev = 17;  // a device of this test's own
  static constexpr size_t kSize = 1 << 20;

  void SetUp() override {
    auto link = std::make_unique<FakeLink>();
    link_ = link.get();
    comm_ = std::make_unique<SendComm>(kDev, std::make_shared<NetCtx>(), std::move(link), 1e9);
    data_ = enginetest::bf16_data(kSize, 5);
    mr_.base = reinterpret_cast<char*>(data_.data());
    mr_.size = data_.size();
    mr_.kind = MemKind::kHost;
  }
  int64_t backlog() const { return link_backlog(kDev)->bytes(); }
  // One receive of kSize, offering staging or not.
  void clear_to_send(uint32_t seq, bool staging) {
    ClearToSend c;
    c.seq = seq;
    c.n = 1;
    c.first = seq;
    c.p[0].tag = 1;
    c.p[0].capacity = kSize;
    if (staging) {
      staging_.emplace_back(2 * kSize);
      c.p[0].staging = reinterpret_cast<uintptr_t>(staging_.back().data());
      c.p[0].staging_bytes = 2 * kSize;
    }
    link_->cts_.push_back(c);
  }
  void* isend() {
    void* req = nullptr;
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (!req) {
      EXPECT_EQ(comm_->isend(data_.data(), kSize, 1, &mr_, &req), ncclSuccess);
      if (Clock::now() > end) break;
    }
    return req;
  }
  // Tests req until it is with the link (test() moves it there), then lets it through.
  void complete(void* req, size_t posted) {
    int done = 0;
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (link_->posted_.size() < posted) {
      ASSERT_EQ(comm_->test(static_cast<Request*>(req), &done, nullptr), ncclSuccess);
      ASSERT_LT(Clock::now(), end) << "the message never reached the link";
    }
    ASSERT_FALSE(done);
    link_->posted_.back().x->pending.store(0);
    ASSERT_EQ(comm_->test(static_cast<Request*>(req), &done, nullptr), ncclSuccess);
    ASSERT_TRUE(done);
  }

  FakeLink* link_ = nullptr;
  std::unique_ptr<SendComm> comm_;
  std::vector<uint8_t> data_;
  std::vector<std::vector<char>> staging_;
  Mr mr_{};
};

TEST_F(SendBacklog, RawMessagesCountUntilThroughTheLink) {
  ASSERT_EQ(backlog(), 0);
  clear_to_send(0, false);
  void* req = isend();
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(backlog(), int64_t(kSize)) << "raw: its bytes, from its isend";
  ASSERT_NO_FATAL_FAILURE(complete(req, 1));
  EXPECT_EQ(backlog(), 0);
}

TEST_F(SendBacklog, CodedMessagesCountTheirEncodedBytes) {
  clear_to_send(0, true);
  void* req = isend();
  ASSERT_NE(req, nullptr);
  const int64_t at_isend = backlog();
  const auto end = Clock::now() + std::chrono::seconds(10);
  int done = 0;
  while (link_->posted_.empty()) {
    ASSERT_EQ(comm_->test(static_cast<Request*>(req), &done, nullptr), ncclSuccess);
    ASSERT_LT(Clock::now(), end) << "the encode never finished";
  }
  const MessageHeader& h = link_->posted_.back().h;
  ASSERT_TRUE(h.compressed) << "the CPU codec, probed once";
  EXPECT_LT(h.wire_bytes, kSize);
  EXPECT_EQ(backlog(), int64_t(h.wire_bytes)) << "what the encode made";
  // The CPU codec's thread may finish before isend returns (its progress takes the result).
  EXPECT_TRUE(at_isend == int64_t(double(kSize) * kAssumedRatio) || at_isend == int64_t(h.wire_bytes))
      << at_isend << ": neither the ratio assumed before any is measured nor the encoded size";
  ASSERT_NO_FATAL_FAILURE(complete(req, 1));
  EXPECT_EQ(backlog(), 0);
}

TEST_F(SendBacklog, ClosingTakesBackWhatIsStillOnTheLink) {
  clear_to_send(0, false);
  clear_to_send(1, false);
  ASSERT_NE(isend(), nullptr);
  ASSERT_NE(isend(), nullptr);
  EXPECT_EQ(backlog(), int64_t(2 * kSize));
  comm_.reset();
  EXPECT_EQ(backlog(), 0);
}

}  // namespace
}  // namespace zipccl
