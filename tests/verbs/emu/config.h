// The emulation's environment knobs, parsed into plain structs (no verbs objects), so the
// parsers are unit-tested on their own: NCCL_ZIP_EMU_DEVICES, NCCL_ZIP_EMU_FAULT and
// NCCL_ZIP_EMU_GDR.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zipccl::verbs::emu {

struct DeviceSpec {
  std::string name;
  bool roce = false;     // Ethernet link layer (RoCE) instead of InfiniBand
  int ports = 1;
  bool down = false;     // every port reported DOWN, traffic through it lost
};

// `name[:ib|roce[:nports[:down]]]`, comma-separated. Null (unset) gives one `emu_0`, IB, 1 port;
// an empty string gives no devices. Names are [A-Za-z0-9_-], 1..63 characters, unique; nports
// 1..8. Returns false and says why in *error for anything else.
bool parse_device_specs(const char* env, std::vector<DeviceSpec>* out, std::string* error);

// Which work request (1-based, counted per opened context over its post_send WRs) triggers what.
// 0 = off.
struct FaultPlan {
  uint64_t rkey = 0;         // N-th RDMA write/read: the target rejects its rkey
  uint64_t retry = 0;        // N-th WR: every transmission lost, RETRY_EXC_ERR after the retries
  uint64_t qp_error = 0;     // once the N-th WR completes: its QP to ERR + IBV_EVENT_QP_FATAL
  uint64_t device_lost = 0;  // once the N-th WR completes: IBV_EVENT_DEVICE_FATAL, device dead
  uint64_t delay_us = 0;     // each WR waits a random 0..delay_us before it goes out
};

// `kind:N` comma list over rkey, retry, qp_error, device_lost, delay_us. Null or empty: no
// faults. Unknown kinds or bad numbers fail with the reason in *error.
bool parse_fault_plan(const char* env, FaultPlan* out, std::string* error);

// How the emulated host's kernel can register CUDA device memory with the HCA (GPUDirect RDMA).
struct GdrSupport {
  bool dmabuf = true;    // ibv_reg_dmabuf_mr works (else every call fails with EOPNOTSUPP)
  bool peermem = false;  // nvidia-peermem loaded: ibv_reg_mr takes device pointers (else EFAULT)
};

// Comma list of `dmabuf`, `peermem`, or just `none`. Null (unset) gives dmabuf only. Empty,
// unknown words and `none` with anything else fail with the reason in *error.
bool parse_gdr_support(const char* env, GdrSupport* out, std::string* error);

}  // namespace zipccl::verbs::emu
