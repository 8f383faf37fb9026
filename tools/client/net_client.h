// The client side of the plugin ABI, for the tests, the demo and the benchmark (not part of the
// plugin): loads libnccl-net-zip.so with dlopen, as NCCL does, and exposes whichever ncclNet_vN
// table was asked for through one version-neutral interface. The log lines NCCL's logger would
// print are captured (and echoed to stderr with ZIP_TEST_LOG=1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl_abi.h"

namespace zipccl::client {

struct NetProps {
  std::string name;
  std::string pci_path;
  int port = 0;
  uint64_t guid = 0;
  int ptr_support = 0;
  int speed = 0;
  int max_comms = 0;
  int max_recvs = 0;
  size_t max_p2p_bytes = 0;  // v9+
};

class PluginNet {
 public:
  // Loads `path` and looks up ncclNetPlugin_v<version>. Aborts with a message on failure.
  // traffic_class: the v10 connect / v11 init config's (-1: undefined, as NCCL passes by default).
  PluginNet(const std::string& path, int version, int traffic_class = -1);
  ~PluginNet();

  int version() const { return version_; }
  const char* name() const;
  ncclResult_t init(uint64_t comm_id = 0x1234);
  ncclResult_t finalize();
  ncclResult_t devices(int* n);
  ncclResult_t properties(int dev, NetProps* p);
  ncclResult_t listen(int dev, void* handle, void** lc);
  ncclResult_t connect(int dev, void* handle, void** sc);
  ncclResult_t accept(void* lc, void** rc);
  ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh);
  ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mh);
  ncclResult_t dereg_mr(void* comm, void* mh);
  ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req);
  // flag_polled: preset *request to the LL/LL128 hint as NCCL 2.24+ does (ignored for v8).
  ncclResult_t irecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mhs, bool flag_polled,
                     void** req);
  ncclResult_t iflush(void* rc, int n, void** data, int* sizes, void** mhs, void** req);
  ncclResult_t test(void* req, int* done, int* sizes);
  ncclResult_t close_send(void* sc);
  ncclResult_t close_recv(void* rc);
  ncclResult_t close_listen(void* lc);
  // v11 only: announce the protocol of the collective being progressed (bit 0 LL, 1 LL128, 2 Simple).
  ncclResult_t set_proto(uint32_t proto_mask);

 private:
  int version_;
  int traffic_class_;
  void* lib_ = nullptr;
  const void* table_ = nullptr;
  void* ctx_ = nullptr;
};

// Captured log (WARN and INFO lines), thread-safe.
std::vector<std::string> log_lines();
int count_log(const std::string& needle);
void clear_log();

// The per-connection summary the plugin logs when a comm closes.
struct CommSummary {
  long messages = -1;
  long compressed = -1;
  double mb_in = 0, mb_wire = 0, codec_s = 0;
  long gpu_jobs = 0;  // codec jobs the resident GPU codec ran
  long offered = -1, receives = -1;  // a receiver's: receives that offered staging, of all posted
  long unoffered = 0;  // a sender's: messages its policy would have compressed, sent raw unoffered
  long cold = 0;       // a sender's: messages it would have compressed, sent raw for a cold kernel
  long pushed = 0;     // a sender's: messages sent before their receive's record, as it allowed
  long probes = 0;     // a receiver's: offers that were a quiet offer gate's probes
};
// The last "send comm ..." or "recv comm ..." summary in the captured log; false if none.
bool last_summary(const std::string& side, CommSummary* out);

}  // namespace zipccl::client
