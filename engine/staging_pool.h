// Staging: host buffers that hold compressed messages, the sender's codec output and the
// receiver's landing place. Pooled per comm and registered with its link while they exist, so
// the data path does not allocate or register once warm.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "transport.h"

namespace zipccl {

class StagingPool {
 public:
  explicit StagingPool(Link* link) : link_(link) {}
  struct Buf {
    std::unique_ptr<char[]> p;
    size_t cap = 0;
    std::unique_ptr<MemReg> reg;
  };
  // A buffer of at least `bytes`: the best fit among the free ones, else the largest grown.
  Buf take(size_t bytes);
  void give(Buf b);
  size_t held_bytes() const { return held_; }

 private:
  // (Re)allocates b's memory, registration first released and then renewed.
  void allocate(Buf* b, size_t bytes);

  Link* link_;
  std::vector<Buf> free_;
  size_t held_ = 0;  // bytes allocated, in use or free
};

}  // namespace zipccl
