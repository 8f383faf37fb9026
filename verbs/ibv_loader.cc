#include "ibv_loader.h"

#include <dlfcn.h>

#include <cstdlib>

namespace zipccl::verbs {
namespace {

constexpr const char* kBaseVersion = "IBVERBS_1.1";

// Stores dlvsym(name, version) into *slot; returns whether it was found.
template <typename Fn>
bool lookup(void* handle, const char* name, const char* version, Fn* slot) {
  void* sym = dlvsym(handle, name, version);
  *slot = reinterpret_cast<Fn>(sym);
  return sym != nullptr;
}

}  // namespace

IbvLibrary::~IbvLibrary() {
  if (handle_) dlclose(handle_);
}

std::string ibverbs_library_path() {
  const char* env = std::getenv("NCCL_ZIP_IBVERBS_LIB");
  return env && *env ? env : "libibverbs.so.1";
}

std::unique_ptr<IbvLibrary> load_ibverbs(const std::string& path, std::string* error) {
  // RTLD_LOCAL: libibverbs' symbols must not satisfy lookups of other libraries in the process.
  // RTLD_NODELETE: never unmapped, as under NCCL (which never closes it): ibv_fork_init and the
  // providers keep state in it for the life of the process.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) {
    const char* why = dlerror();
    *error = "cannot load " + path + ": " + (why ? why : "unknown dlopen error");
    return nullptr;
  }
  std::unique_ptr<IbvLibrary> lib(new IbvLibrary);
  lib->handle_ = handle;
  lib->path_ = path;
  IbvFunctions& f = lib->fn_;

  std::string missing;
  auto need = [&](const char* name, auto* slot) {
    if (lookup(handle, name, kBaseVersion, slot)) return;
    missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  need("ibv_fork_init", &f.fork_init);
  need("ibv_get_device_list", &f.get_device_list);
  need("ibv_free_device_list", &f.free_device_list);
  need("ibv_get_device_name", &f.get_device_name);
  need("ibv_open_device", &f.open_device);
  need("ibv_close_device", &f.close_device);
  need("ibv_get_async_event", &f.get_async_event);
  need("ibv_ack_async_event", &f.ack_async_event);
  need("ibv_query_device", &f.query_device);
  need("ibv_query_port", &f.query_port);
  need("ibv_query_gid", &f.query_gid);
  need("ibv_query_qp", &f.query_qp);
  need("ibv_alloc_pd", &f.alloc_pd);
  need("ibv_dealloc_pd", &f.dealloc_pd);
  need("ibv_reg_mr", &f.reg_mr);
  need("ibv_dereg_mr", &f.dereg_mr);
  need("ibv_create_cq", &f.create_cq);
  need("ibv_destroy_cq", &f.destroy_cq);
  need("ibv_create_qp", &f.create_qp);
  need("ibv_modify_qp", &f.modify_qp);
  need("ibv_destroy_qp", &f.destroy_qp);
  need("ibv_event_type_str", &f.event_type_str);
  need("ibv_wc_status_str", &f.wc_status_str);
  if (!missing.empty()) {
    *error = path + " lacks " + kBaseVersion + " symbols: " + missing;
    return nullptr;  // the destructor closes the library
  }

  lookup(handle, "ibv_reg_mr_iova2", "IBVERBS_1.8", &f.reg_mr_iova2);
  lookup(handle, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", &f.reg_dmabuf_mr);
  lookup(handle, "ibv_query_port_speed", "IBVERBS_1.16", &f.query_port_speed);
  return lib;
}

}  // namespace zipccl::verbs
