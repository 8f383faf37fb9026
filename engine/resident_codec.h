// The resident GPU codec of one CUDA device as NCCL's threads use it (protocol:
// zipccl/service_protocol.h). NCCL's progress thread takes leases, posts jobs and polls results:
// memory accesses and atomics only, never a CUDA call, never a wait. Our launcher thread makes
// every CUDA call: it starts the kernel when a lease is asked for while none runs, and stops it
// once no lease has been held for the idle time, so that an application's cudaDeviceSynchronize
// or cudaFree waits at most that long for it (idle: no lease held, no job unread). A lease is granted only while the kernel runs, and
// the kernel stops only when none is held; so whoever holds one may post, and every job posted is
// finished. If the launcher blocks, no lease is granted and the caller codes nothing (raw).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zipccl/service_protocol.h"

namespace zipccl {

// What runs the device side: the CUDA kernel (resident_cuda.cc) or, in tests, an emulation.
class ServiceDevice {
 public:
  virtual ~ServiceDevice() = default;
  // The mapped ServiceHost, zeroed before the first launch; valid for this object's lifetime.
  virtual gpu::ServiceHost* host() = 0;
  // Starts generation `generation` with `ctas` CTAs; on the launcher thread, may block.
  virtual bool launch(uint32_t generation, int ctas, std::string* err) = 0;
  // After the launch has said it exited: collects it (its stream), on the launcher thread.
  virtual bool reap(std::string* err) = 0;
  // Where its CTAs run, for the log ("on 5 SMs (...)"); empty where nothing is known.
  virtual std::string placement() const { return ""; }
  // The CTAs to launch where `asked` were asked: more where the CUDA device's SM partition holds
  // room for more (its split's granularity), since those SMs are the application's loss either way.
  virtual int launch_ctas(int asked) const { return asked; }
};

// CUDA device `device`'s kernel of `ctas` CTAs, its state allocated, its stream made (on an SM
// partition, NCCL_ZIP_GPU_CTAS_PER_SM) and the kernel launched once now (call where CUDA calls
// may block, before the codec is used); null with *err where that fails or without CUDA.
std::unique_ptr<ServiceDevice> make_cuda_service_device(int device, int ctas, std::string* err);

class ResidentCodec : public std::enable_shared_from_this<ResidentCodec> {
 public:
  struct Options {
    int ctas = 16;
    int64_t idle_us = 50;       // idle for this long: the kernel exits
    // A kernel started on demand stays at least this long for its asker, who comes back on
    // NCCL's next call (NCCL_ZIP_GPU_WAIT_US): later than idle_us, it would find the kernel gone.
    int64_t start_grace_us = 0;
    int64_t retry_ms = 1000;    // a failed launch is tried again after this long
    int64_t exit_wait_ms = 10000;  // at destruction, how long to wait for the kernel to exit
  };
  enum State : uint32_t { kStopped, kStarting, kRunning, kStopping };

  // Starts the launcher thread, which shares the object: it goes when both are done with it.
  static std::shared_ptr<ResidentCodec> create(std::unique_ptr<ServiceDevice> device, const Options& options);
  ~ResidentCodec();
  ResidentCodec(const ResidentCodec&) = delete;
  ResidentCodec& operator=(const ResidentCodec&) = delete;
  // Stops the kernel and ends the launcher, waiting for both at most exit_wait_ms each (a CUDA
  // call that blocks holds the launcher; it then ends on its own later). No lease may be held.
  // If the kernel does not exit, the device side is never freed under it (logged). True: the
  // launcher thread has ended (joined); false: it had not ended within the wait.
  bool shutdown();

  // True: the kernel runs and stays until release(). False: it does not (yet); the launcher is
  // asked to start it and the caller codes nothing now.
  bool acquire();
  void release();
  // Asks the launcher to start the kernel now, for leases asked soon (NCCL_ZIP_GPU_PREWARM); it
  // then stays the start grace. No lease; nothing where it runs or is asked for already.
  void prewarm();
  // With a lease held: publishes a job; false when its ring slot is still unread (256 jobs out).
  bool post(const gpu::ServiceJob& job, uint64_t* index);
  // True once job `index` is done: its result in *r (and times in *t), its ring slot free again.
  bool poll(uint64_t index, gpu::Result* r, gpu::JobTimes* t = nullptr);

  // Where the device runs its CTAs (ServiceDevice::placement()).
  std::string placement() const { return device_->placement(); }
  // The kernel's CTAs' time coding tiles of op (0 encode, 1 decode) so far, and how many share it.
  uint64_t tile_ns(int op) const { return gpu::service_tile_ns(host_, opt_.ctas, op); }
  int ctas() const { return opt_.ctas; }

  State state() const { return State(word_.load(std::memory_order_acquire) & kStateMask); }
  uint32_t launches() const { return generation_.load(std::memory_order_acquire); }
  // How long the kernel took to run from the first lease asked for while it did not, each start
  // (the first kStartSamples), and the medians of its parts: the launcher's wake-up, the launch
  // call, the launch to the kernel running. E.g. "started 40 times, 60 us median from demand to
  // running (p90 90, max 400; medians: awake 5, launch call 10, to running 45)"; empty before the
  // first. After shutdown() returned true.
  std::string start_summary() const;
  // Quantile q of those times from demand to running, us; -1 before the first start. After
  // shutdown() returned true.
  int64_t start_us(double q) const;

 private:
  ResidentCodec(std::unique_ptr<ServiceDevice> device, const Options& options);
  void wake_launcher();  // once per demand
  static constexpr uint64_t kStateMask = 3, kLease = 4;
  void run();
  // The launcher's steps, each returning when its transition is done or abandoned.
  void start();
  void stop_if_idle(std::unique_lock<std::mutex>& lk);  // or sleeps until it may be
  void stop();
  bool wait_memory(bool (*seen)(const gpu::ServiceHost*, uint32_t), int64_t limit_ms);
  bool set_state(State from, State to);

  std::unique_ptr<ServiceDevice> device_;
  gpu::ServiceHost* const host_;
  const Options opt_;
  // State in the low two bits, leases held above them: a lease is granted only in kRunning and
  // the kernel leaves kRunning only with none held, in one atomic word.
  std::atomic<uint64_t> word_{kStopped};
  std::atomic<int64_t> last_active_ns_{0};  // a lease released or a result read
  std::atomic<uint32_t> unread_count_{0};
  std::atomic<bool> demand_{false};
  std::atomic<int64_t> demand_ns_{0};  // when demand_ was raised
  static constexpr size_t kStartSamples = 1 << 16;
  // The launcher's, per start: demand to running, and its parts (demand to awake, the launch
  // call, launched to running).
  std::vector<int64_t> start_ns_, awake_ns_, launch_ns_, run_ns_;
  std::atomic<uint32_t> generation_{0};
  std::mutex post_mu_;  // several progress threads (one per communicator) may post
  uint64_t tail_ = 0;   // jobs posted
  std::atomic<uint8_t> unread_[gpu::kServiceRing] = {};
  std::mutex mu_;  // the launcher's sleep
  std::condition_variable cv_;
  std::atomic<bool> quit_{false};
  bool launcher_done_ = false;  // under mu_
  std::thread launcher_;  // joined by shutdown(), or detached when it does not end in time
  bool leaked_ = false;  // the kernel did not exit: its memory is never freed
  int64_t retry_at_ns_ = 0;
};

}  // namespace zipccl
