// Device memory for the plugin's test and demo drivers: real CUDA allocations when the build has
// CUDA, otherwise nothing (device cases then skip). Every call checks its CUDA status and aborts with a message
// on failure, so a test never continues on wrong data.
#pragma once

#include <cstddef>
#include <string>

namespace zipccl::client {

// True if device buffers can be tested here; else *why says why (for GTEST_SKIP).
bool have_cuda_device(std::string* why);
void* dev_alloc(size_t bytes);
void dev_free(void* p);
// Pinned host memory mapped for the GPUs, as NCCL allocates its host buffers.
void* host_alloc_mapped(size_t bytes);
void host_free_mapped(void* p);
void to_device(void* dst, const void* src, size_t bytes);
void from_device(void* dst, const void* src, size_t bytes);
void dev_fill(void* p, int byte, size_t bytes);
// A DMA-BUF fd for [p, p + bytes) of device memory (page-aligned p), as NCCL exports one for
// regMrDmaBuf; -1 with *why where the driver or GPU cannot. The caller closes it.
int dev_dmabuf_fd(void* p, size_t bytes, std::string* why);

}  // namespace zipccl::client
