// One opened RDMA device (HCA): its context and protection domain, shared by the plugin devices
// of its ports, their connections and registrations (the last holder closes it), and the thread
// that reads its asynchronous events: each is logged, and fatal ones fail the connections they
// concern (a device fatal event every connection on the device).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ibv_loader.h"
#include "status.h"

namespace zipccl::verbs {

class IbHca {
 public:
  // Opens `device` and allocates its protection domain; null (with *why) on failure.
  static std::shared_ptr<IbHca> open(std::shared_ptr<IbvLibrary> lib, ibv_device* device, std::string* why);
  ~IbHca();
  IbHca(const IbHca&) = delete;
  IbHca& operator=(const IbHca&) = delete;

  const IbvFunctions& fn() const { return lib_->fn(); }
  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }
  const ibv_device_attr& attr() const { return attr_; }

  // Starts the async event thread (once the HCA is known to be used); stops and joins it.
  void start_events();
  void stop_events();
  // A connection's queue pairs and completion queue, so that async events on them reach its
  // sticky error. Unwatch before destroying the object.
  void watch(const void* object, std::weak_ptr<StickyError> err);
  void unwatch(const void* object);
  // Set by a device fatal event: nothing on this device works any more.
  bool fatal() const { return fatal_.load(std::memory_order_acquire); }

 private:
  IbHca() = default;
  void event_loop(int fd);
  void handle(const ibv_async_event& ev);
  void fail_watched(const void* object, const std::string& why);

  std::shared_ptr<IbvLibrary> lib_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::string name_;
  ibv_device_attr attr_{};
  std::atomic<bool> fatal_{false};
  std::atomic<bool> stop_{false};
  std::thread events_;
  std::mutex mu_;
  std::map<const void*, std::weak_ptr<StickyError>> watched_;
};

}  // namespace zipccl::verbs
