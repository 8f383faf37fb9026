// Device memory for the GPUDirect RDMA tests (emu_gdr_device_test.cc), from the CUDA runtime on
// GPU machines (emu_gdr_device_cudart.cc) or from the fake libcuda everywhere
// (emu_gdr_device_fake.cc): the same tests run against both.
#pragma once

#include <cstddef>
#include <string>

namespace zipccl::verbs::emu_test::gdr {

// Why there is no device memory to test with here (the tests skip), or empty.
std::string unavailable();
// n bytes of device memory on device 0, null on failure.
void* alloc(size_t n);
void release(void* p);
// Host <-> device copies; false on failure.
bool upload(void* device_dst, const void* host_src, size_t n);
bool download(void* host_dst, const void* device_src, size_t n);

}  // namespace zipccl::verbs::emu_test::gdr
