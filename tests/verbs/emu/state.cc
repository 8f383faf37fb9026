#include "state.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace zipccl::verbs::emu {
namespace {

template <typename Map, typename Key>
auto lookup(Map& map, Key key) -> decltype(map.begin()->second.get()) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : it->second.get();
}

// One byte per pending event on a socketpair: the read end polls readable exactly while events
// are queued, and its reader can take a byte without blocking whatever the fd's flags are.
void signal_fd(int fd) {
  char byte = 1;
  [[maybe_unused]] ssize_t n = send(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// Takes the bytes of n events that are withdrawn from a queue before anyone read them.
void unsignal_fd(int fd, size_t n) {
  char buf[64];
  while (n) {
    ssize_t got = recv(fd, buf, std::min(n, sizeof(buf)), MSG_DONTWAIT);
    if (got <= 0) return;
    n -= static_cast<size_t>(got);
  }
}

// Withdraws the unread async events about an object that is being destroyed, so no reader is
// handed a pointer to it afterwards.
template <typename Pred>
void withdraw_events(Context* ctx, Pred about) {
  size_t before = ctx->events.size();
  ctx->events.erase(std::remove_if(ctx->events.begin(), ctx->events.end(), about),
                    ctx->events.end());
  unsignal_fd(ctx->verbs.async_fd, before - ctx->events.size());
}

}  // namespace

Context* find(Emu& e, ibv_context* p) { return lookup(e.contexts, p); }
Pd* find(Emu& e, ibv_pd* p) { return lookup(e.pds, p); }
Cq* find(Emu& e, ibv_cq* p) { return lookup(e.cqs, p); }
Qp* find(Emu& e, ibv_qp* p) { return lookup(e.qps, p); }

uint32_t new_key(Emu& e) {
  for (;;) {
    uint32_t key = static_cast<uint32_t>(e.rng());
    if (key && !e.lkeys.count(key) && !e.rkeys.count(key)) return key;
  }
}

void raise_event(Context* ctx, ibv_async_event event) {
  if (ctx->closing) return;
  ctx->events.push_back(event);
  signal_fd(ctx->async_signal_fd);
}

void push_cqe(Cq* cq, const Cqe& cqe) {
  if (cq->entries.size() >= static_cast<size_t>(cq->verbs.cqe)) {
    if (!cq->overflowed) {
      cq->overflowed = true;
      ibv_async_event ev{};
      ev.element.cq = &cq->verbs;
      ev.event_type = IBV_EVENT_CQ_ERR;
      raise_event(cq->ctx, ev);
    }
    return;
  }
  cq->entries.push_back(cqe);
  if (cq->armed && cq->channel) {
    cq->armed = false;
    cq->channel->events.push_back(cq);
    signal_fd(cq->channel->signal_fd);
  }
}

void to_error(Qp* qp) { qp->verbs.state = IBV_QPS_ERR; }

void lose_device(Emu& e, Context* ctx) {
  if (ctx->lost) return;
  ctx->lost = true;
  for (auto& [ptr, qp] : e.qps) {
    if (qp->ctx == ctx) to_error(qp.get());
  }
  ibv_async_event ev{};
  ev.element.port_num = 0;
  ev.event_type = IBV_EVENT_DEVICE_FATAL;
  raise_event(ctx, ev);
}

Cqe make_cqe(const Qp* qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode) {
  Cqe c;
  c.wc.wr_id = wr_id;
  c.wc.status = status;
  c.wc.opcode = opcode;
  c.wc.qp_num = qp->verbs.qp_num;
  c.epoch = qp->epoch;
  return c;
}

void drop_qp(Emu& e, Qp* qp) {
  if (const char* path = std::getenv("NCCL_ZIP_EMU_STATS")) {
    // One line per QP, appended whole (O_APPEND), so processes can share the file.
    char line[256];
    const int len = std::snprintf(line, sizeof line, "qp=%u pid=%d sends=%llu writes=%llu writes_imm=%llu reads=%llu\n",
                                  qp->verbs.qp_num, int(getpid()), (unsigned long long)qp->sends,
                                  (unsigned long long)qp->writes, (unsigned long long)qp->writes_imm,
                                  (unsigned long long)qp->reads);
    const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, size_t(len)) != len)
      std::fprintf(stderr, "zipccl-verbs-emu: NCCL_ZIP_EMU_STATS: cannot append to %s\n", path);
    if (fd >= 0) close(fd);
  }
  withdraw_events(qp->ctx, [qp](const ibv_async_event& ev) {
    return (ev.event_type == IBV_EVENT_QP_FATAL || ev.event_type == IBV_EVENT_QP_REQ_ERR ||
            ev.event_type == IBV_EVENT_QP_ACCESS_ERR) && ev.element.qp == &qp->verbs;
  });
  --qp->pd->refs;
  --qp->send_cq->refs;
  --qp->recv_cq->refs;
  pthread_cond_destroy(&qp->verbs.cond);
  pthread_mutex_destroy(&qp->verbs.mutex);
  e.qpns.erase(qp->verbs.qp_num);
  e.qps.erase(&qp->verbs);
}

void drop_mr(Emu& e, Mr* mr) {
  e.lkeys.erase(mr->verbs.lkey);
  e.rkeys.erase(mr->verbs.rkey);
  --mr->pd->refs;
  e.mrs.erase(&mr->verbs);
}

void drop_cq(Emu& e, Cq* cq) {
  withdraw_events(cq->ctx, [cq](const ibv_async_event& ev) {
    return ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == &cq->verbs;
  });
  if (Channel* ch = cq->channel) {
    size_t before = ch->events.size();
    ch->events.erase(std::remove(ch->events.begin(), ch->events.end(), cq), ch->events.end());
    unsignal_fd(ch->verbs.fd, before - ch->events.size());
    --ch->refs;
  }
  pthread_cond_destroy(&cq->verbs.cond);
  pthread_mutex_destroy(&cq->verbs.mutex);
  e.cqs.erase(&cq->verbs);
}

void drop_pd(Emu& e, Pd* pd) { e.pds.erase(&pd->verbs); }

void drop_channel(Emu& e, Channel* ch) {
  close(ch->verbs.fd);
  close(ch->signal_fd);
  e.channels.erase(&ch->verbs);
}

}  // namespace zipccl::verbs::emu
