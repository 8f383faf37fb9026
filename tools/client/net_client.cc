#include "net_client.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace zipccl::client {
namespace {

std::mutex g_mu;
std::vector<std::string> g_lines;

void logger(ncclDebugLogLevel level, unsigned long, const char* file, int line, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN && level != NCCL_LOG_INFO) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::string s = std::string(level == NCCL_LOG_WARN ? "WARN " : "INFO ") + buf;
  if (getenv("ZIP_TEST_LOG")) fprintf(stderr, "[%d] %s (%s:%d)\n", int(getpid()), s.c_str(), file, line);
  std::lock_guard<std::mutex> g(g_mu);
  g_lines.push_back(s);
}

[[noreturn]] void die(const std::string& m) {
  fprintf(stderr, "net_client: %s\n", m.c_str());
  std::abort();
}

template <class T>
const T* tbl(const void* t) {
  return static_cast<const T*>(t);
}

}  // namespace

std::vector<std::string> log_lines() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_lines;
}

int count_log(const std::string& needle) {
  int n = 0;
  for (const auto& l : log_lines()) n += l.find(needle) != std::string::npos;
  return n;
}

void clear_log() {
  std::lock_guard<std::mutex> g(g_mu);
  g_lines.clear();
}

bool last_summary(const std::string& side, CommSummary* out) {
  const auto lines = log_lines();
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const size_t p = it->find(side + " comm ");
    const size_t c = it->find(" closed: ");
    if (p == std::string::npos || c == std::string::npos) continue;
    CommSummary s;
    if (sscanf(it->c_str() + c,
               " closed: %ld messages (%ld compressed), %lf MB in, %lf MB on the wire, ratio %*f, codec %lf s, "
               "%ld codec jobs on the GPU",
               &s.messages, &s.compressed, &s.mb_in, &s.mb_wire, &s.codec_s, &s.gpu_jobs) != 6)
      return false;
    const size_t o = it->find(", staging offered to ");
    if (o != std::string::npos) sscanf(it->c_str() + o, ", staging offered to %ld of %ld", &s.offered, &s.receives);
    // ", N <phrase>": the count that a phrase follows, where the line has it.
    const auto count = [&](const char* phrase, long* n) {
      const size_t at = it->find(phrase);
      if (at != std::string::npos) *n = atol(it->c_str() + it->rfind(", ", at) + 2);
    };
    count(" raw unoffered that it would have compressed", &s.unoffered);
    count(" raw for a cold kernel", &s.cold);
    count(" pushed (the receives offered nothing)", &s.pushed);
    count(" of them probes of a quiet gate", &s.probes);
    *out = s;
    return true;
  }
  return false;
}

PluginNet::PluginNet(const std::string& path, int version, int traffic_class)
    : version_(version), traffic_class_(traffic_class) {
  lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) die(std::string("dlopen: ") + dlerror());
  const std::string sym = "ncclNetPlugin_v" + std::to_string(version);
  table_ = dlsym(lib_, sym.c_str());
  if (!table_) die("no symbol " + sym);
}

PluginNet::~PluginNet() { dlclose(lib_); }

// Dispatch on the version: the members have the same names in every table.
#define ZT_CALL(expr_v8, expr_v9, expr_v10, expr_v11) \
  switch (version_) {                                 \
    case 8: { auto* t = tbl<ncclNet_v8_t>(table_); return expr_v8; }    \
    case 9: { auto* t = tbl<ncclNet_v9_t>(table_); return expr_v9; }    \
    case 10: { auto* t = tbl<ncclNet_v10_t>(table_); return expr_v10; } \
    default: { auto* t = tbl<ncclNet_v11_t>(table_); return expr_v11; } \
  }
#define ZT_SAME(call) ZT_CALL(t->call, t->call, t->call, t->call)

const char* PluginNet::name() const { ZT_SAME(name) }

ncclResult_t PluginNet::init(uint64_t comm_id) {
  ncclNetCommConfig_t cfg{traffic_class_};
  ZT_CALL(t->init(logger), t->init(logger), t->init(logger, nullptr),
          t->init(&ctx_, comm_id, &cfg, logger, nullptr))
}

ncclResult_t PluginNet::finalize() {
  if (version_ < 11) return ncclSuccess;
  return tbl<ncclNet_v11_t>(table_)->finalize(ctx_);
}

ncclResult_t PluginNet::devices(int* n) { ZT_SAME(devices(n)) }

ncclResult_t PluginNet::properties(int dev, NetProps* p) {
  auto common = [&](const auto& q) {
    p->name = q.name ? q.name : "";
    p->pci_path = q.pciPath ? q.pciPath : "";
    p->port = q.port;
    p->guid = q.guid;
    p->ptr_support = q.ptrSupport;
    p->speed = q.speed;
    p->max_comms = q.maxComms;
    p->max_recvs = q.maxRecvs;
  };
  ncclResult_t r;
  if (version_ == 8) {
    ncclNetProperties_v8_t q{};
    r = tbl<ncclNet_v8_t>(table_)->getProperties(dev, &q);
    common(q);
  } else if (version_ < 11) {
    ncclNetProperties_v9_t q{};
    r = version_ == 9 ? tbl<ncclNet_v9_t>(table_)->getProperties(dev, &q)
                      : tbl<ncclNet_v10_t>(table_)->getProperties(dev, &q);
    common(q);
    p->max_p2p_bytes = q.maxP2pBytes;
  } else {
    ncclNetProperties_v11_t q{};
    r = tbl<ncclNet_v11_t>(table_)->getProperties(dev, &q);
    common(q);
    p->max_p2p_bytes = q.maxP2pBytes;
  }
  return r;
}

ncclResult_t PluginNet::listen(int dev, void* h, void** lc) {
  ZT_CALL(t->listen(dev, h, lc), t->listen(dev, h, lc), t->listen(dev, h, lc), t->listen(ctx_, dev, h, lc))
}

ncclResult_t PluginNet::connect(int dev, void* h, void** sc) {
  ncclNetDeviceHandle_t* dh = nullptr;
  ncclNetCommConfig_t cfg{traffic_class_};
  ZT_CALL(t->connect(dev, h, sc, &dh), t->connect(dev, h, sc, &dh), t->connect(dev, &cfg, h, sc, &dh),
          t->connect(ctx_, dev, h, sc, &dh))
}

ncclResult_t PluginNet::accept(void* lc, void** rc) {
  ncclNetDeviceHandle_t* dh = nullptr;
  ZT_SAME(accept(lc, rc, &dh))
}

ncclResult_t PluginNet::reg_mr(void* c, void* d, size_t s, int type, void** mh) { ZT_SAME(regMr(c, d, s, type, mh)) }
ncclResult_t PluginNet::reg_mr_dmabuf(void* c, void* d, size_t s, int type, uint64_t off, int fd, void** mh) {
  ZT_SAME(regMrDmaBuf(c, d, s, type, off, fd, mh))
}
ncclResult_t PluginNet::dereg_mr(void* c, void* mh) { ZT_SAME(deregMr(c, mh)) }

ncclResult_t PluginNet::isend(void* sc, void* d, size_t s, int tag, void* mh, void** req) {
  ZT_CALL(t->isend(sc, d, int(s), tag, mh, req), t->isend(sc, d, s, tag, mh, req),
          t->isend(sc, d, s, tag, mh, nullptr, req), t->isend(sc, d, s, tag, mh, nullptr, req))
}

ncclResult_t PluginNet::irecv(void* rc, int n, void** d, size_t* s, int* tags, void** mhs, bool ll, void** req) {
  *req = ll && version_ >= 9 ? reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION) : nullptr;
  int si[8];
  for (int i = 0; i < n && i < 8; ++i) si[i] = int(s[i]);
  void* ph[8] = {};
  ZT_CALL(t->irecv(rc, n, d, si, tags, mhs, req), t->irecv(rc, n, d, s, tags, mhs, req),
          t->irecv(rc, n, d, s, tags, mhs, ph, req), t->irecv(rc, n, d, s, tags, mhs, ph, req))
}

ncclResult_t PluginNet::iflush(void* rc, int n, void** d, int* s, void** mhs, void** req) {
  ZT_SAME(iflush(rc, n, d, s, mhs, req))
}
ncclResult_t PluginNet::test(void* req, int* done, int* sizes) { ZT_SAME(test(req, done, sizes)) }
ncclResult_t PluginNet::close_send(void* sc) { ZT_SAME(closeSend(sc)) }
ncclResult_t PluginNet::close_recv(void* rc) { ZT_SAME(closeRecv(rc)) }
ncclResult_t PluginNet::close_listen(void* lc) { ZT_SAME(closeListen(lc)) }

ncclResult_t PluginNet::set_proto(uint32_t proto_mask) {
  if (version_ < 11) return ncclSuccess;
  ncclNetAttr_t a{};
  a.op = 1u << 4;  // AllReduce
  a.algo = 1u << 1;
  a.proto = proto_mask;
  return tbl<ncclNet_v11_t>(table_)->setNetAttr(ctx_, &a);
}

}  // namespace zipccl::client
