// Closing a link over real TCP: a request completes once the kernel has its bytes, so a sender may
// close with most of them still in its kernel; a close that resets the connection (the peer's
// records unread) would throw them away.
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "raw_peer.h"
#include "sockets.h"

namespace zipccl::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// A TCP connection over loopback, both ends non-blocking: fd[0] the connecting end, with a send
// buffer of sndbuf bytes; fd[1] the accepted end, with a receive buffer of rcvbuf (0: defaults).
struct TcpPair {
  int fd[2] = {-1, -1};
  TcpPair(int rcvbuf, int sndbuf) {
    // Not listen_socket(): the receive buffer must be set before listen(), or the window it
    // announces ignores it.
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf) {
      EXPECT_EQ(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), 0);
    }
    SockAddr a{};
    a.sin.sin_family = AF_INET;
    a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = addr_len(a);
    EXPECT_EQ(bind(l, &a.sa, len), 0);
    EXPECT_EQ(listen(l, 1), 0);
    EXPECT_EQ(getsockname(l, &a.sa, &len), 0);
    fd[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (sndbuf) {
      EXPECT_EQ(setsockopt(fd[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf), 0);
    }
    EXPECT_EQ(connect(fd[0], &a.sa, addr_len(a)), 0);  // blocking: accepted once it returns
    fd[1] = accept(l, nullptr, nullptr);
    close(l);
    for (int f : fd) EXPECT_TRUE(set_conn_options(f, 0));
  }
};

// The sender's control socket's bytes its peer has not acknowledged.
int unacknowledged(int fd) {
  int n = -1;
  EXPECT_EQ(ioctl(fd, SIOCOUTQ, &n), 0);
  return n;
}

// Six 40 KiB messages inline (on the control socket), their clear-to-sends taken, all sends
// complete while the receiver reads nothing (a 4 KiB receive buffer: nearly all of them still in
// the sender's kernel), and one more clear-to-send the sender never reads (its close would reset).
// The sending link is destroyed at once; the receiver starts reading 200 ms later and gets every
// byte.
TEST(Close, SenderClosedBeforeItsReceiverReadsDeliversEverything) {
  constexpr int kMsgs = 6;
  constexpr size_t kBytes = 40 << 10;
  TcpPair ctrl(4096, 1 << 20), data(0, 0);
  auto send = std::make_unique<SocketLink>(std::vector<int>{ctrl.fd[0], data.fd[0]}, "receiver", nullptr, 5000,
                                           InlineRule(kMaxInline), 0);
  SocketLink recv({ctrl.fd[1], data.fd[1]}, "sender", nullptr, 5000, InlineRule(kMaxInline), 0);

  std::vector<std::vector<char>> target(kMsgs, std::vector<char>(kBytes, 0)), msg;
  for (int i = 0; i < kMsgs; ++i) msg.push_back(pattern(kBytes, i));
  for (uint32_t i = 0; i < kMsgs; ++i) {
    ClearToSend cts{};
    cts.seq = i;
    cts.n = 1;
    cts.p[0].capacity = kBytes;
    cts.p[0].target = reinterpret_cast<uintptr_t>(target[i].data());
    ASSERT_EQ(recv.post_cts(cts), ncclSuccess);
  }

  Xfer x[kMsgs];
  int taken = 0, done = 0;
  for (const auto end = Clock::now() + std::chrono::seconds(5); done < kMsgs && Clock::now() < end;) {
    ClearToSend cts;
    bool got = false;
    if (taken < kMsgs) {
      ASSERT_EQ(send->poll_cts(&cts, &got), ncclSuccess) << send->error_text();
      if (got) {
        MessageHeader h;
        h.seq = uint32_t(taken);
        h.wire_bytes = h.orig_bytes = kBytes;
        ASSERT_EQ(send->post_message(h, cts.p[0], msg[size_t(taken)].data(), &x[taken]), ncclSuccess);
        ++taken;
      }
    }
    ASSERT_EQ(send->progress(), ncclSuccess) << send->error_text();
    done = 0;
    for (int i = 0; i < taken; ++i) done += x[i].done();
  }
  ASSERT_EQ(done, kMsgs) << "the sender's kernel did not take its messages";
  // One more clear-to-send, written as the receiving link would, without the progress its
  // post_cts() makes (which would take the messages in): it arrives unread at the sender.
  write_all(ctrl.fd[1], cts_record(kMsgs, kBytes));
  int unread = 0;
  ASSERT_EQ(ioctl(ctrl.fd[0], SIOCINQ, &unread), 0);
  ASSERT_GT(unread, 0) << "no record unread at the sender: its close would not reset";
  ASSERT_GT(unacknowledged(ctrl.fd[0]), int(kBytes)) << "the receiver's kernel took them: nothing to lose";

  std::vector<MessageHeader> arrived;
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (const auto end = Clock::now() + std::chrono::seconds(5); arrived.size() < kMsgs && Clock::now() < end;) {
      MessageHeader h;
      bool got = false;
      if (recv.progress() != ncclSuccess || recv.poll_arrival(&h, &got) != ncclSuccess) break;
      if (got) arrived.push_back(h);
    }
  });
  send.reset();
  reader.join();
  EXPECT_EQ(recv.error(), ncclSuccess) << recv.error_text();
  ASSERT_EQ(arrived.size(), size_t(kMsgs));
  for (int i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(arrived[size_t(i)].seq, uint32_t(i));
    EXPECT_EQ(arrived[size_t(i)].wire_bytes, kBytes);
    EXPECT_EQ(target[size_t(i)], msg[size_t(i)]) << "message " << i;
  }
}

// Seconds a sending link with stall time stall_ms takes to close, its last message (64 KiB inline)
// with the kernel, towards a peer that reads nothing and never closes.
double close_seconds_with_silent_peer(int64_t stall_ms) {
  TcpPair ctrl(4096, 1 << 20), data(0, 0);
  auto send = std::make_unique<SocketLink>(std::vector<int>{ctrl.fd[0], data.fd[0]}, "receiver", nullptr, stall_ms,
                                           InlineRule(kMaxInline), 0);
  write_all(ctrl.fd[1], cts_record(0, kMaxInline));
  ClearToSend cts;
  EXPECT_TRUE(next_cts(*send, &cts));
  const std::vector<char> big = pattern(kMaxInline, 1);
  Xfer x;
  MessageHeader h;
  h.wire_bytes = h.orig_bytes = kMaxInline;
  EXPECT_EQ(send->post_message(h, cts.p[0], big.data(), &x), ncclSuccess);
  for (const auto end = Clock::now() + std::chrono::seconds(2); !x.done() && Clock::now() < end;)
    EXPECT_EQ(send->progress(), ncclSuccess);
  EXPECT_TRUE(x.done());
  const auto t0 = Clock::now();
  send.reset();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  close(ctrl.fd[1]);
  close(data.fd[1]);
  return s;
}

// The close gives up after the link's stall time, and after 2 s where that is longer or off (an
// abort closes every connection in turn), rather than waiting for a silent peer for good.
TEST(Close, SilentPeerHoldsTheCloseOnlyForTheStallTime) {
  const double short_stall = close_seconds_with_silent_peer(300);
  EXPECT_GE(short_stall, 0.25);
  EXPECT_LT(short_stall, 1.5);
  const double off = close_seconds_with_silent_peer(0);
  EXPECT_GE(off, 1.9);
  EXPECT_LT(off, 3.5);
}

// A peer that closed its end with bytes unread (a reset) wants nothing more: the close does not
// wait for it, nor report the bytes it no longer takes.
TEST(Close, ResetByThePeerEndsTheWaitAtOnce) {
  TcpPair ctrl(4096, 1 << 20);
  const std::vector<char> bytes = pattern(256 << 10, 3);
  size_t off = 0;
  EXPECT_EQ(send_some(ctrl.fd[0], bytes.data(), bytes.size(), &off), Io::kDone);  // the kernel holds them
  ASSERT_GT(unacknowledged(ctrl.fd[0]), 64 << 10);
  close(ctrl.fd[1]);  // its receive queue holds bytes: the kernel resets the connection
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto t0 = Clock::now();
  EXPECT_EQ(close_delivered(ctrl.fd[0], 2000), 0u);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.5);
}

}  // namespace
}  // namespace zipccl::tcp
