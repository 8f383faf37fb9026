#include "ib_hca.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "log.h"

namespace zipccl::verbs {
namespace {

// HCAs whose event thread runs. At exit NCCL may leave connections open, and they keep their HCA
// (and its thread) alive past our destructors, while libibverbs' own destructors (run after all
// of ours) may free what the thread reads. So the set, constructed at the first use (after the
// plugin's namespace-scope statics, hence destroyed before them, at exit or at the plugin's
// dlclose), stops every thread still running when it goes. A static destructor is bound to its
// library; an atexit handler may not be (ThreadSanitizer's is not).
struct Running {
  std::mutex mu;
  std::set<IbHca*> hcas;
  ~Running();
};
std::atomic<bool> g_running_gone{false};  // trivially destructible: readable after ~Running

Running& running() {
  static Running r;
  return r;
}

Running::~Running() {
  std::set<IbHca*> left;
  {
    std::lock_guard<std::mutex> g(mu);  // an HCA closing on another thread now erases under it
    left.swap(hcas);
    g_running_gone.store(true, std::memory_order_release);
  }
  for (IbHca* h : left) h->stop_events();
}

}  // namespace

std::shared_ptr<IbHca> IbHca::open(std::shared_ptr<IbvLibrary> lib, ibv_device* device, std::string* why) {
  std::shared_ptr<IbHca> h(new IbHca);
  h->lib_ = std::move(lib);
  const IbvFunctions& f = h->fn();
  h->name_ = f.get_device_name(device);
  h->ctx_ = f.open_device(device);
  if (!h->ctx_) {
    *why = h->name_ + ": ibv_open_device failed: " + std::strerror(errno);
    return nullptr;
  }
  if (f.query_device(h->ctx_, &h->attr_) != 0) {
    *why = h->name_ + ": ibv_query_device failed: " + std::strerror(errno);
    return nullptr;
  }
  h->pd_ = f.alloc_pd(h->ctx_);
  if (!h->pd_) {
    *why = h->name_ + ": ibv_alloc_pd failed: " + std::strerror(errno);
    return nullptr;
  }
  return h;
}

IbHca::~IbHca() {
  if (!g_running_gone.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(running().mu);
    running().hcas.erase(this);
    stop_events();
  }
  if (pd_ && fn().dealloc_pd(pd_) != 0) ZIP_WARN("%s: ibv_dealloc_pd failed: %s", name_.c_str(), std::strerror(errno));
  if (ctx_) fn().close_device(ctx_);
}

void IbHca::start_events() {
  std::lock_guard<std::mutex> g(running().mu);
  if (events_.joinable()) return;
  // Non-blocking, so the thread can wake up to see stop_ (ibv_get_async_event blocks otherwise).
  const int fd = ctx_->async_fd;
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  events_ = std::thread([this, fd] { event_loop(fd); });
  running().hcas.insert(this);
}

void IbHca::stop_events() {
  stop_.store(true, std::memory_order_release);
  if (events_.joinable()) events_.join();
}

void IbHca::watch(const void* object, std::weak_ptr<StickyError> err) {
  std::lock_guard<std::mutex> g(mu_);
  watched_[object] = std::move(err);
}

void IbHca::unwatch(const void* object) {
  std::lock_guard<std::mutex> g(mu_);
  watched_.erase(object);
}

void IbHca::fail_watched(const void* object, const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& kv : watched_) {
    if (object && kv.first != object) continue;
    if (auto err = kv.second.lock()) err->set(ncclSystemError, why);
  }
}

void IbHca::event_loop(int fd) {
  while (!stop_.load(std::memory_order_acquire)) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) return;  // the device is gone: nothing more will come
    ibv_async_event ev;
    if (fn().get_async_event(ctx_, &ev) != 0) continue;
    handle(ev);
    fn().ack_async_event(&ev);  // last: the event's object may go away once acknowledged
  }
}

void IbHca::handle(const ibv_async_event& ev) {
  const char* what = fn().event_type_str(ev.event_type);
  switch (ev.event_type) {
    case IBV_EVENT_DEVICE_FATAL: {
      ZIP_WARN("%s: fatal device event: %s; failing every connection on it", name_.c_str(), what);
      fatal_.store(true, std::memory_order_release);
      fail_watched(nullptr, name_ + ": " + what);
      break;
    }
    case IBV_EVENT_CQ_ERR:
      ZIP_WARN("%s: completion queue error event: %s", name_.c_str(), what);
      fail_watched(ev.element.cq, name_ + ": " + what);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
      ZIP_WARN("%s: queue pair %u error event: %s", name_.c_str(), ev.element.qp->qp_num, what);
      fail_watched(ev.element.qp, name_ + ": " + what);
      break;
    case IBV_EVENT_COMM_EST:
      break;
    default:
      // Port state, GID, LID, SM changes and the like: worth a line, not a failure by themselves.
      ZIP_WARN("%s: async event: %s (%d)", name_.c_str(), what, int(ev.event_type));
      break;
  }
}

}  // namespace zipccl::verbs
