// CUDA codec for the zipccl format v1 (zipccl/format.h). Output is byte-identical to the CPU
// reference codec (zipccl/codec.h), so either side decodes the other.
//
// Built for a non-blocking network proxy thread:
//  - one launch codes a batch of messages; the host passes nothing but kernel parameters
//    (no host->device copy, no allocation, no synchronisation inside encode/decode);
//  - each message's size and status land in a caller-given Result array, which may be pinned
//    host memory: read it once an event recorded after the call has completed
//    (cudaEventQuery), or poll Result::done, which the device writes last;
//  - temporary memory is explicit and caller-owned; it must be zeroed once (init_temp) and
//    every launch leaves it zeroed again, so launches on one stream can reuse it back to back.
//    One temp buffer serves one launch at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "zipccl/codec.h"
#include "zipccl/format.h"
#include "zipccl/gpu_result.h"

namespace zipccl::gpu {

// Items per kernel launch; larger batches are split into several launches.
constexpr int kMaxBatch = 64;

struct EncodeItem {
  const void* in = nullptr;  // device memory, any alignment (16-byte aligned is fastest)
  size_t bytes = 0;
  void* out = nullptr;  // device memory; 16-byte aligned is fastest
  size_t out_cap = 0;   // >= max_compressed_bytes(bytes) always suffices
  Codec codec = Codec::BF16;
  bool auto_codec = false;  // pick the codec on device, exactly as zipccl::classify() does
};

struct DecodeItem {
  const void* in = nullptr;  // one message (untrusted)
  size_t in_bytes = 0;
  void* out = nullptr;
  size_t out_cap = 0;  // the expected decoded size: one CTA is launched per 8 KiB of it
};

struct EncodeOptions {
  bool checksum = false;   // as zipccl::EncodeOptions::checksum
  double max_ratio = 1.0;  // as zipccl::EncodeOptions::max_ratio
  // When the message falls back to Raw, write only its header and set Result::raw_from_input:
  // the sender then transmits header + input and saves a device copy. The bytes on the wire
  // are identical to the CPU's Raw message.
  bool raw_header_only = false;
};

// Temporary memory for one launch over messages whose encode input (or decode output
// capacity) sizes are sizes[0..n). temp_bytes_bound() covers any batch of at most n_items
// messages totalling total_bytes. Bulk encodes (batches of 16 MiB or more) also run with less,
// down to what they need without their scratch (1/32 of the input), but slower.
size_t temp_bytes(const size_t* sizes, int n);
size_t temp_bytes_bound(size_t total_bytes, int n_items);

// Zero temp once before its first use (an async memset on stream).
cudaError_t init_temp(void* temp, size_t temp_bytes, cudaStream_t stream);

// Encode n items on stream. results[i] (device or pinned host memory) gets item i's message
// length and status (kOk, kNoSpace, kTooLarge) as the CPU encode() would return them.
// Returns cudaErrorInvalidValue for bad arguments (temp too small, null pointers), else the
// launch status. Never blocks. On an error return the batch's results are not published (do
// not wait for them) and temp is left zeroed for the next call.
cudaError_t encode_batch(const EncodeItem* items, int n, void* temp, size_t temp_bytes, Result* results,
                         cudaStream_t stream, const EncodeOptions& opt = {});

// Decode n messages. results[i].status is the zipccl::Status the CPU decode() returns for the
// same input; the device never reads past in+in_bytes nor writes past out+out_cap.
cudaError_t decode_batch(const DecodeItem* items, int n, void* temp, size_t temp_bytes, Result* results,
                         cudaStream_t stream);

#ifdef ZIPCCL_GPU_TRACE
// Instrumented builds only (kernels/cuda/trace.cuh): the phase clocks of the last encode or
// decode launch, slot s of CTA b at out[b][s] (SM cycles; slots 12 and 13: %globaltimer ns at
// entry and exit). Synchronous.
constexpr int kTraceTiles = 8192, kTraceSlots = 16;
cudaError_t read_encode_trace(unsigned long long (*out)[kTraceSlots]);
cudaError_t read_decode_trace(unsigned long long (*out)[kTraceSlots]);
#endif

}  // namespace zipccl::gpu
