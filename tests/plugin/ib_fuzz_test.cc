// The verbs data path against a hostile sender, driven through the plugin's ABI over the
// emulated HCA: a fake peer (fake_verbs_peer.h) reads the plugin's clear-to-sends from its
// mailbox and RDMA-writes messages into the placements, mostly right (raw into the receive,
// compressed messages the codec made into the staging, split over its queue pairs as the plugin
// splits them), now and then with a fault in what only the immediates say (sizes, the compressed
// flag, parts on the wrong queue pair or missing, stray immediates, a SEND), damaged compressed
// bytes, a placement skipped, or the bootstrap socket closed early. The peer writes only inside
// the placements, as the NIC would let it. Whatever arrives, the plugin must answer with success
// or a remote/system error that stays, never write outside the receive buffers, never report more
// bytes than a receive takes, and close without hanging; where nothing was broken, every receive
// completes with the bytes sent. Seeds are fixed (the iteration number); ZIP_FUZZ_ITERATIONS runs
// more of them.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_verbs_peer.h"
#include "fuzz_support.h"
#include "ib_wire.h"
#include "net_client.h"
#include "pair.h"
#include "zipccl/codec.h"

using namespace zipccl::client;
using namespace zipccl::test;
using namespace zipccl::verbs;

namespace {

constexpr size_t kPeerBuffer = 4 << 20;  // per queue pair: every message's part on it, at once
constexpr size_t kDataStart = 64 << 10;  // past the mailbox in the first queue pair's buffer
constexpr size_t kWriteChunk = 256 << 10;

uint64_t size_near(Rng& r, uint64_t cap) {
  switch (r.below(6)) {
    case 0: return 0;
    case 1: return cap;
    case 2: return cap + 1;
    case 3: return cap + 1 + r.below(1 << 20);
    case 4: return r.below(cap + 1);
    default: return r.below(uint64_t(1) << 31);
  }
}

// How the plugin splits a message of n bytes over nqps queue pairs (ib_p2p.cc), spelled out: at
// most one part per 64 KiB, parts of whole 128-byte lines, part p on queue pair p.
struct Split {
  uint32_t parts;
  size_t part_len;
};
Split split(size_t n, uint32_t nqps) {
  if (n == 0) return Split{1, 0};
  const size_t want = std::max<size_t>(1, std::min<size_t>(nqps, (n + (64 << 10) - 1) / (64 << 10)));
  const size_t part_len = ((n + want - 1) / want + 127) / 128 * 128;
  return Split{uint32_t((n + part_len - 1) / part_len), part_len};
}

// One RDMA write (with immediate or not) the fake peer posts: bytes from its buffer on queue
// pair qp into the plugin's memory.
struct Write {
  uint32_t qp;
  ibv_wr_opcode op;
  size_t off, len;  // in ep[qp]'s buffer
  uint64_t remote;
  uint32_t rkey, imm;
};


class IbFakePeerFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ib_run()) GTEST_SKIP() << "runs in the ib. copy of the suite (over the emulated libibverbs)";
    // Every receive offers staging: compressed messages may come for any of them.
    setenv("NCCL_ZIP_ENABLE", "2", 1);
    ASSERT_EQ(net_.init(), ncclSuccess);
  }
  void TearDown() override {
    if (ib_run()) {
      EXPECT_EQ(net_.finalize(), ncclSuccess);
    }
  }
  PluginNet net_{ZIP_PLUGIN_PATH, 11};
};

TEST_F(IbFakePeerFuzz, HostileSenderNeverBreaksTheReceiver) {
  const int n_iter = fuzz_iterations(40);
  int errors = 0, completions = 0, clean = 0;
  for (int it = 0; it < n_iter; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    Rng r(0x1BF0 + uint64_t(it));
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void *lc = nullptr, *rc = nullptr;
    ASSERT_EQ(net_.listen(0, handle, &lc), ncclSuccess);
    const uint32_t nqps = 1 + uint32_t(r.below(4));
    FakeVerbsPeer peer;
    int fd = -1;
    ASSERT_EQ(accept_fake_sender(net_, lc, handle, int(nqps), &peer, &fd, &rc, kPeerBuffer), "");

    // Receives with guard bytes around every buffer.
    FuzzReceives fr;
    ASSERT_EQ(post_fuzz_receives(net_, rc, r, &fr), ncclSuccess);
    std::vector<FuzzRecv>& recvs = fr.recvs;
    GuardedBuffers& bufs = *fr.bufs;

    // What the plugin offered: its clear-to-sends, from the fake peer's mailbox.
    std::vector<CtsSlot> offered(recvs.size());
    for (size_t i = 0; i < recvs.size(); ++i) {
      const double end = now_s() + 5;
      while (!peer.cts(uint32_t(i), &offered[i]) && now_s() < end) {
        int done = 0;
        ASSERT_EQ(net_.test(recvs[0].req, &done, nullptr), ncclSuccess);
      }
      ASSERT_EQ(offered[i].n, uint32_t(recvs[i].n)) << "no clear-to-send for receive " << i;
    }

    // The fake sender's writes, message by message in placement order.
    std::vector<Write> writes;
    std::vector<size_t> used(nqps, 0);  // of each queue pair's buffer
    used[0] = kDataStart;
    bool broken = false;
    const uint64_t fault_odds = 2 + r.below(16);
    for (size_t i = 0; i < offered.size(); ++i) {
      for (uint32_t sub = 0; sub < offered[i].n; ++sub) {
        const CtsEntry& e = offered[i].e[sub];
        if (r.one_in(12)) {  // never sent: this receive and every later one wait
          broken = true;
          continue;
        }
        std::vector<char> body, want;
        uint32_t imm;
        uint64_t remote, region;
        uint32_t rkey;
        if (e.staging_bytes && r.one_in(2)) {  // a compressed message the codec made
          want.resize(r.below(e.capacity + 1) & ~uint64_t(1));
          for (auto& x : want) x = char(r.below(4) == 0 ? r.below(256) : 0x3C);
          body.resize(zipccl::max_compressed_bytes(want.size()));
          size_t len = 0;
          ASSERT_EQ(zipccl::encode(zipccl::Codec::BF16, want.data(), want.size(), body.data(), body.size(), &len),
                    zipccl::Status::kOk);
          body.resize(len);
          imm = kImmCompressed | uint32_t(body.size());
          remote = e.staging_addr;
          rkey = e.staging_rkey;
          region = e.staging_bytes;
        } else {
          body.resize(r.below(e.capacity + 1));
          for (auto& x : body) x = char(r.below(256));
          want = body;
          imm = uint32_t(r.below(4)) << kImmRawWhyShift | uint32_t(body.size());  // any RawWhy
          remote = e.target_addr;
          rkey = e.target_rkey;
          region = e.capacity;
        }
        const Split sp = split(body.size(), nqps);
        std::vector<uint32_t> part_qp(sp.parts), part_imm(sp.parts, imm);
        std::vector<ibv_wr_opcode> last_op(sp.parts, IBV_WR_RDMA_WRITE_WITH_IMM);
        for (uint32_t p = 0; p < sp.parts; ++p) part_qp[p] = p;
        std::vector<Write> extra;
        if (r.one_in(fault_odds)) {
          broken = true;
          const uint32_t p = uint32_t(r.below(sp.parts));
          switch (r.below(8)) {
            case 0:  // a size the bytes do not have, the flag bits kept
              imm = (imm & kImmCompressed) ? kImmCompressed | uint32_t(size_near(r, region) & ~kImmCompressed)
                                           : (imm & ~kImmRawBytes) | uint32_t(size_near(r, region) & kImmRawBytes);
              std::fill(part_imm.begin(), part_imm.end(), imm);
              break;
            case 1:
              std::fill(part_imm.begin(), part_imm.end(), imm ^ kImmCompressed);
              break;
            case 2:  // damaged bytes
              if (!body.empty()) body[r.below(body.size())] ^= char(1 + r.below(255));
              break;
            case 3:
              part_qp[p] = uint32_t(r.below(nqps));
              break;
            case 4:  // one part's immediate not its message's
              part_imm[p] ^= uint32_t(1 + r.below(0xFFFF));
              break;
            case 5:  // a part without its immediate
              last_op[p] = IBV_WR_RDMA_WRITE;
              break;
            case 6:  // a stray immediate
              extra.push_back(Write{uint32_t(r.below(nqps)), IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0, remote, rkey,
                                    uint32_t(r.g())});
              break;
            default:  // a SEND, which no receive of the plugin takes
              extra.push_back(Write{uint32_t(r.below(nqps)), IBV_WR_SEND_WITH_IMM, 0, 0, 0, 0, imm});
              break;
          }
        }
        for (uint32_t p = 0; p < sp.parts; ++p) {
          const size_t begin = std::min<size_t>(body.size(), size_t(p) * sp.part_len);
          const size_t len = std::min<size_t>(body.size() - begin, sp.part_len);
          const uint32_t q = part_qp[p];
          ASSERT_LE(used[q] + len, kPeerBuffer);
          if (len) std::memcpy(peer.ep[q]->buffer() + used[q], body.data() + begin, len);
          // Only inside the placement, in chunks, the last carrying the immediate.
          const size_t fits = begin >= region ? 0 : std::min<size_t>(len, region - begin);
          size_t done = 0;
          do {
            const size_t n = std::min(kWriteChunk, fits - done);
            const bool last = done + n == fits;
            writes.push_back(Write{q, last ? last_op[p] : IBV_WR_RDMA_WRITE, used[q] + done, n,
                                   remote + begin + done, rkey, part_imm[p]});
            done += n;
          } while (done < fits);
          used[q] += len;
        }
        writes.insert(writes.end(), extra.begin(), extra.end());
        if (!broken) recvs[i].want[sub] = want;
      }
    }
    const bool close_early = r.one_in(8);
    broken |= close_early;
    clean += !broken;
    std::thread sender([&] {
      std::vector<size_t> posted(nqps, 0);
      const size_t upto = close_early ? writes.size() / 2 : writes.size();
      for (size_t w = 0; w < upto; ++w) {
        const Write& x = writes[w];
        if (peer.ep[x.qp]->post(x.op, w, x.off, x.len, true, x.remote, x.rkey, htonl(x.imm)) == 0) ++posted[x.qp];
      }
      if (close_early) shutdown(fd, SHUT_RDWR);
      for (uint32_t q = 0; q < nqps; ++q) peer.ep[q]->poll(posted[q], std::chrono::milliseconds(2000));
    });

    // Poll every receive; everything it says must hold. Where nothing was broken, all complete
    // with the bytes sent.
    const ncclResult_t sticky =
        test_fuzz_receives(net_, fr, ncclSuccess, broken ? 0.25 : 10, &completions, [&](const FuzzRecv& p, const int* sizes) {
          for (int j = 0; j < p.n && !broken; ++j) {
            const size_t b = p.first + size_t(j);
            EXPECT_EQ(size_t(sizes[j]), p.want[j].size()) << "buffer " << b;
            if (!p.want[j].empty() && size_t(sizes[j]) == p.want[j].size()) {
              EXPECT_EQ(std::memcmp(bufs.data(b), p.want[j].data(), p.want[j].size()), 0) << "buffer " << b << " holds other bytes";
            }
          }
        });
    if (!broken) {
      EXPECT_EQ(sticky, ncclSuccess) << "a well-formed exchange failed";
      EXPECT_EQ(fr.open(), 0) << "a well-formed exchange left receives open";
    }
    errors += sticky != ncclSuccess;
    shutdown(fd, SHUT_RDWR);
    sender.join();
    close_fuzz_receives(net_, rc, fr);
    close(fd);
    EXPECT_EQ(net_.close_listen(lc), ncclSuccess);
  }
  printf("%d iterations (%d well-formed): %d failed the link, %d receives completed\n", n_iter, clean, errors,
         completions);
  EXPECT_GT(clean, 0) << "no well-formed exchange: the happy path went untested";
  EXPECT_GT(errors, 0) << "no fault failed the link: the faults went untested";
}

// A fake receiver's clear-to-sends, RDMA-written into the sending plugin's mailbox: mostly right
// (placements in its buffer, raw only or with staging), now and then with a fault (a receive
// count out of range, a foreign key, an address outside its memory, a staging size that is not
// the codec's bound, a tag no send has, an end stamp that never matches); and the sends NCCL
// would make against them, now and then one larger than its receive. Whatever it says, the
// plugin must answer with success or an error that stays and close without hanging; where
// nothing was broken, every send completes and each message, raw or compressed, lands in its
// placement with its immediate, holding the bytes sent.
TEST_F(IbFakePeerFuzz, HostileReceiverNeverBreaksTheSender) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  ASSERT_EQ(net_.listen(0, handle, &lc), ncclSuccess);  // a handle in the plugin's format
  const int n_iter = fuzz_iterations(40);
  int errors = 0, completions = 0, clean = 0, compressed = 0;
  for (int it = 0; it < n_iter; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    Rng r(0x5E4D + uint64_t(it));
    FakeVerbsPeer peer;
    QpInfo theirs;
    int lfd = -1, cfd = -1;
    void* sc = nullptr;
    ASSERT_EQ(connect_fake_receiver(net_, handle, &peer, &theirs, &lfd, &cfd, &sc, kPeerBuffer), "");
    ASSERT_EQ(peer.ep.size(), 1u);  // NCCL_IB_QPS_PER_CONNECTION's default
    auto& ep = *peer.ep[0];
    for (int i = 0; i < 64; ++i) ASSERT_EQ(ep.post_recv(uint64_t(i), 0, 0), 0);  // for the immediates

    struct Placed {
      size_t size;     // the send's
      int tag;
      uint64_t target, staging, staging_bytes;  // offsets in the fake's buffer
    };
    std::vector<Placed> placed;
    bool broken = false;
    const int n_cts = 1 + int(r.below(4));
    const uint64_t fault_odds = 2 + r.below(16);
    size_t used = kDataStart;
    for (int c = 0; c < n_cts; ++c) {
      CtsSlot slot;
      std::memset(&slot, 0, sizeof slot);
      slot.stamp = uint32_t(c) + 1;
      slot.n = 1 + uint32_t(r.below(3));
      uint32_t end = slot.stamp;
      for (uint32_t i = 0; i < slot.n; ++i) {
        CtsEntry& e = slot.e[i];
        e.tag = int32_t(i);
        e.capacity = r.below(70000);
        e.target_addr = ep.addr(used);
        e.target_rkey = ep.mr()->rkey;
        Placed p{r.one_in(20) ? size_t(e.capacity + 1) : size_t(r.below(e.capacity + 1)), e.tag, used, 0, 0};
        broken |= p.size > e.capacity;
        used += e.capacity;
        if (r.one_in(2)) {
          e.staging_bytes = zipccl::max_compressed_bytes(e.capacity);
          e.staging_addr = ep.addr(used);
          e.staging_rkey = ep.mr()->rkey;
          p.staging = used;
          p.staging_bytes = e.staging_bytes;
          used += e.staging_bytes;
        }
        placed.push_back(p);
      }
      if (r.one_in(fault_odds)) {
        broken = true;
        CtsEntry& e = slot.e[r.below(slot.n)];
        switch (r.below(7)) {
          case 0: slot.n = uint32_t(r.pick<uint64_t>({0, 9, 1000})); break;
          case 1: e.target_rkey ^= 0x5A5A; break;
          case 2: e.target_addr = r.one_in(2) ? 0 : ep.addr(kPeerBuffer - 16); break;
          case 3: e.staging_rkey ^= 0x5A5A; break;
          case 4: e.staging_bytes = size_near(r, 70000); break;
          case 5: e.tag = int32_t(r.g()); break;
          default: end ^= 1; break;  // never all of it landed
        }
      }
      const uint32_t shown = std::min(slot.n, zipccl::kMaxRecvs);
      std::memcpy(reinterpret_cast<char*>(&slot) + end_stamp_offset(shown), &end, sizeof end);
      const size_t at = 8192 + size_t(c) * sizeof(CtsSlot);
      std::memcpy(ep.buffer() + at, &slot, sizeof slot);
      ASSERT_EQ(ep.post(IBV_WR_RDMA_WRITE, 1000 + uint64_t(c), at, cts_bytes(shown), true,
                        theirs.mailbox_addr + (uint64_t(c) % kFifoSlots) * sizeof(CtsSlot), theirs.mailbox_rkey),
                0);
    }
    ASSERT_LE(used, kPeerBuffer);
    clean += !broken;

    std::vector<char> src(70000);
    for (auto& x : src) x = char(r.below(4) ? 0x3C : r.below(256));
    void* mh = nullptr;
    ASSERT_EQ(net_.reg_mr(sc, src.data(), src.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
    std::vector<FuzzSend> sends;
    for (const Placed& p : placed) sends.push_back({p.size, p.tag});
    size_t finished = 0;
    const ncclResult_t sticky = drive_sends(net_, sc, src.data(), mh, sends, broken ? 0.25 : 10, &finished);
    completions += int(finished);
    if (!broken) {
      EXPECT_EQ(sticky, ncclSuccess) << "a well-formed exchange failed";
      EXPECT_EQ(finished, placed.size()) << "a well-formed exchange left sends open";
      // Each message's immediate, in order, and its bytes where it says.
      const auto wcs = ep.poll(placed.size() + size_t(n_cts), std::chrono::milliseconds(5000));
      size_t k = 0;
      for (const ibv_wc& wc : wcs) {
        if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) continue;  // our clear-to-send writes
        ASSERT_LT(k, placed.size());
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        const Placed& p = placed[k++];
        const uint32_t imm = ntohl(wc.imm_data);
        std::vector<char> got(p.size);
        size_t n = 0;
        if (imm & kImmCompressed) {
          ASSERT_NE(p.staging_bytes, 0u) << "compressed for a raw-only placement";
          const size_t wire = imm & ~kImmCompressed;
          ASSERT_LE(wire, p.staging_bytes);
          ASSERT_EQ(zipccl::decode(ep.buffer() + p.staging, wire, got.data(), got.size(), &n), zipccl::Status::kOk);
          ++compressed;
        } else {
          n = imm & kImmRawBytes;
          ASSERT_LE(n, got.size());
          if (n) std::memcpy(got.data(), ep.buffer() + p.target, n);
        }
        EXPECT_EQ(n, p.size) << "message " << k - 1;
        if (n && p.size) {
          EXPECT_EQ(std::memcmp(got.data(), src.data(), std::min(n, p.size)), 0) << "message " << k - 1 << " holds other bytes";
        }
      }
      EXPECT_EQ(k, placed.size()) << "immediates missing";
    }
    if (sticky != ncclSuccess) {
      ++errors;
      void* req = nullptr;
      EXPECT_EQ(net_.isend(sc, src.data(), 10, 0, mh, &req), sticky) << "a failed comm fails every later call";
    }
    shutdown(cfd, SHUT_RDWR);
    const double t0 = now_s();
    EXPECT_EQ(net_.dereg_mr(sc, mh), ncclSuccess);
    EXPECT_EQ(net_.close_send(sc), ncclSuccess);
    EXPECT_LT(now_s() - t0, 5.0) << "close waited on the hostile peer";
    close(cfd);
    close(lfd);
  }
  EXPECT_EQ(net_.close_listen(lc), ncclSuccess);
  printf("%d iterations (%d well-formed, %d messages compressed there): %d failed the link, %d sends completed\n",
         n_iter, clean, compressed, errors, completions);
  EXPECT_GT(clean, 0) << "no well-formed exchange: the happy path went untested";
  EXPECT_GT(compressed, 0) << "nothing compressed: the staging path went untested";
  EXPECT_GT(errors, 0) << "no fault failed the link: the faults went untested";
}

}  // namespace
