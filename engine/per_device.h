// Process-wide state kept per plugin device (all comms of the process on one device share a NIC):
// one T per device index, made on first use, never moved, for the life of the process.
#pragma once

#include <map>
#include <memory>
#include <mutex>

namespace zipccl {

template <typename T>
T* per_device(int dev) {
  static std::mutex mu;  // comms of several communicators (progress threads) ask at once
  static std::map<int, std::unique_ptr<T>> objects;
  std::lock_guard<std::mutex> g(mu);
  std::unique_ptr<T>& o = objects[dev];
  if (!o) o.reset(new T);
  return o.get();
}

}  // namespace zipccl
