// Completion queues and completion channels.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api.h"
#include "state.h"

using namespace zipccl::verbs::emu;

namespace zipccl::verbs::emu {

int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Cq* c = find(e, cq);
  if (!c || num_entries < 0) return -1;
  int n = 0;
  for (; n < num_entries && !c->entries.empty(); ++n) {
    const Cqe& cqe = c->entries.front();
    wc[n] = cqe.wc;
    // Polling a completion frees its queue slot and, for a send, those of the unsignaled WRs
    // before it: rdma-core providers reclaim send queue space the same way.
    auto it = e.qpns.find(cqe.wc.qp_num);
    if (it != e.qpns.end() && it->second->epoch == cqe.epoch) {
      Qp* qp = it->second;
      if (cqe.send) {
        qp->sq_released = std::max(qp->sq_released, cqe.index + 1);
      } else {
        ++qp->rq_released;
      }
    }
    c->entries.pop_front();
  }
  return n;
}

int req_notify_cq(ibv_cq* cq, int /*solicited_only*/) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Cq* c = find(e, cq);
  if (!c) return EINVAL;
  c->armed = true;
  return 0;
}

}  // namespace zipccl::verbs::emu

ZIP_EMU_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Context* c = find(e, context);
  if (!c) return fail_null<ibv_comp_channel>(EINVAL);
  if (c->lost) return fail_null<ibv_comp_channel>(EIO);
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return nullptr;
  auto ch = std::make_unique<Channel>();
  ch->verbs.context = context;
  ch->verbs.fd = fds[0];
  ch->signal_fd = fds[1];
  return &e.channels.emplace(&ch->verbs, std::move(ch)).first->second->verbs;
}

ZIP_EMU_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  auto it = e.channels.find(channel);
  if (it == e.channels.end()) return EINVAL;
  if (it->second->refs) return EBUSY;
  drop_channel(e, it->second.get());
  return 0;
}

ZIP_EMU_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                     ibv_comp_channel* channel, int comp_vector) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Context* c = find(e, context);
  if (!c) return fail_null<ibv_cq>(EINVAL);
  if (c->lost) return fail_null<ibv_cq>(EIO);
  Channel* ch = nullptr;
  if (channel) {
    auto it = e.channels.find(channel);
    if (it == e.channels.end() || channel->context != context) return fail_null<ibv_cq>(EINVAL);
    ch = it->second.get();
  }
  if (cqe < 1 || cqe > kMaxCqe || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
    return fail_null<ibv_cq>(EINVAL);
  }
  auto cq = std::make_unique<Cq>();
  cq->ctx = c;
  cq->channel = ch;
  if (ch) ++ch->refs;
  ibv_cq& v = cq->verbs;
  v.context = context;
  v.channel = channel;
  v.cq_context = cq_context;
  v.handle = e.next_handle++;
  v.cqe = cqe;  // exactly what was asked: an undersized CQ overflows here as it could on a NIC
  pthread_mutex_init(&v.mutex, nullptr);
  pthread_cond_init(&v.cond, nullptr);
  return &e.cqs.emplace(&v, std::move(cq)).first->second->verbs;
}

ZIP_EMU_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  Cq* c = find(e, cq);
  if (!c) return EINVAL;
  if (c->refs) return EBUSY;
  drop_cq(e, c);
  return 0;
}

ZIP_EMU_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  Emu& e = emu();
  std::unique_lock<std::mutex> lock(e.mu);
  for (;;) {
    auto it = e.channels.find(channel);
    if (it == e.channels.end()) {
      errno = EINVAL;
      return -1;
    }
    Channel* ch = it->second.get();
    if (!ch->events.empty()) {
      Cq* c = ch->events.front();
      ch->events.pop_front();
      char byte;
      [[maybe_unused]] ssize_t n = recv(ch->verbs.fd, &byte, 1, MSG_DONTWAIT);
      *cq = &c->verbs;
      *cq_context = c->verbs.cq_context;
      return 0;
    }
    int fd = ch->verbs.fd;
    if (fcntl(fd, F_GETFL) & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
    // Blocks like rdma-core's read() of the channel fd. As there, destroying the channel while
    // a thread waits here is the caller's error.
    lock.unlock();
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, -1);
    lock.lock();
  }
}

ZIP_EMU_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  Emu& e = emu();
  std::lock_guard<std::mutex> lock(e.mu);
  if (Cq* c = find(e, cq)) c->verbs.comp_events_completed += nevents;
}
