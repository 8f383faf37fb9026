// CUDA device memory for GPUDirect RDMA regions, through libcuda.so.1 loaded at run time: the
// emulation never links CUDA, and where the library (or a device) is missing no address is
// device memory, so CPU machines run exactly as before.
#pragma once

#include <cstddef>

namespace zipccl::verbs::emu {

// The ordinal of the CUDA device whose memory holds [p, p + len) (len > 0), or -1: host memory,
// no libcuda, no device, or a range that does not lie in device memory of one device.
int cuda_device_of(const void* p, size_t len);

// Synchronous copy of n bytes where dst, src or both are memory of that device (unified
// addressing tells which): done once this returns. On the emulation's own non-blocking stream
// in the device's primary context, so it neither waits for nor delays the application's work.
// False (the reason on stderr) when CUDA fails, e.g. the memory was freed while registered.
bool cuda_copy(int device, void* dst, const void* src, size_t n);

}  // namespace zipccl::verbs::emu
