// The resident kernel's side of zipccl/service_protocol.h on a CPU thread, coding with the CPU
// codec: ResidentCodec's leases, launcher and idle exit, and the plugin's whole GPU-codec data
// path, run without a GPU (NCCL_ZIP_GPU_EMULATE=1, a test tool). Hooks make a launch block, fail
// or start late, and the kernel ignore a stop, as a busy or wedged GPU would.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "resident_codec.h"

namespace zipccl {

class EmulatedServiceDevice final : public ServiceDevice {
 public:
  // The hooks and counters outlive the device (a test keeps them after handing the device over).
  struct Control {
    std::atomic<bool> block_launch{false};  // launch() waits while set
    std::atomic<bool> fail_launch{false};
    std::atomic<int64_t> start_delay_us{0};  // between launch and run (queued behind work)
    std::atomic<bool> ignore_stop{false};    // the kernel does not exit while set
    std::atomic<int64_t> job_wait_us{0};     // before each job: time not spent coding (a queue)
    std::atomic<int> launches{0};
    std::atomic<int> running{0};  // kernels between start and exit
    std::atomic<int> max_running{0};
    std::atomic<uint64_t> jobs{0};
    std::atomic<uint64_t> small_tile_jobs{0};  // encodes reported coded in small tiles
    std::atomic<uint64_t> host_decodes{0};  // decodes posted with ServiceJob::in_host
    std::atomic<EmulatedServiceDevice*> device{nullptr};  // for a test to free a leaked one
  };
  explicit EmulatedServiceDevice(std::shared_ptr<Control> control);
  ~EmulatedServiceDevice() override;

  gpu::ServiceHost* host() override { return host_.get(); }
  bool launch(uint32_t generation, int ctas, std::string* err) override;
  bool reap(std::string* err) override;

 private:
  void kernel(uint32_t generation);
  void run_job(uint64_t index, bool alone);

  std::shared_ptr<Control> c_;
  std::unique_ptr<gpu::ServiceHost> host_;
  std::thread thread_;
  uint64_t head_ = 0;  // jobs taken, across launches (as the kernel's board)
  int ctas_ = 1;       // of the running launch: each job takes all of them
};

}  // namespace zipccl
