// libibverbs loaded at run time (dlopen), never linked: the plugin must load on hosts without
// rdma-core and fall back to sockets there. Only real exported functions are looked up; the
// verbs.h data-path calls (ibv_post_send, ibv_poll_cq, ibv_req_notify_cq, ...) are inline
// wrappers over the context's ops table and need no symbol.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

namespace zipccl::verbs {

// Member names drop the ibv_ prefix: verbs.h defines ibv_reg_mr and ibv_query_port as macros.
struct IbvFunctions {
  // Required: looked up at version IBVERBS_1.1 (rdma-core also exports IBVERBS_1.0 compat
  // versions of most of these, with other struct layouts).
  int (*fork_init)();
  ibv_device** (*get_device_list)(int* num_devices);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* device);
  ibv_context* (*open_device)(ibv_device* device);
  int (*close_device)(ibv_context* context);
  int (*get_async_event)(ibv_context* context, ibv_async_event* event);
  void (*ack_async_event)(ibv_async_event* event);
  int (*query_device)(ibv_context* context, ibv_device_attr* attr);
  // The exported entry point, not verbs.h's macro (which first tries the extended op); zero
  // *attr before the call, as that macro does, since older providers leave fields untouched.
  int (*query_port)(ibv_context* context, uint8_t port_num, ibv_port_attr* attr);
  int (*query_gid)(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid);
  int (*query_qp)(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr);
  ibv_pd* (*alloc_pd)(ibv_context* context);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(ibv_mr* mr);
  ibv_cq* (*create_cq)(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                       int comp_vector);
  int (*destroy_cq)(ibv_cq* cq);
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
  int (*destroy_qp)(ibv_qp* qp);
  const char* (*event_type_str)(ibv_event_type event);
  const char* (*wc_status_str)(ibv_wc_status status);

  // Optional: null when this rdma-core predates them (version in brackets).
  ibv_mr* (*reg_mr_iova2)(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                          unsigned access);                                  // IBVERBS_1.8
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                           int access);                                      // IBVERBS_1.12
  int (*query_port_speed)(ibv_context* context, uint8_t port_num,
                          uint64_t* speed_100mbps);                          // IBVERBS_1.16
};

// An open libibverbs and its functions; closes the library when destroyed.
class IbvLibrary {
 public:
  ~IbvLibrary();
  IbvLibrary(const IbvLibrary&) = delete;
  IbvLibrary& operator=(const IbvLibrary&) = delete;

  const IbvFunctions& fn() const { return fn_; }
  const std::string& path() const { return path_; }

 private:
  friend std::unique_ptr<IbvLibrary> load_ibverbs(const std::string&, std::string*);
  IbvLibrary() = default;
  void* handle_ = nullptr;
  std::string path_;
  IbvFunctions fn_{};
};

// NCCL_ZIP_IBVERBS_LIB if set and non-empty (an emulation library for tests; like libibverbs it
// must export its functions at version IBVERBS_1.1 through a linker version script: glibc's
// dlvsym rejects unversioned definitions in a library that has any version table), else
// "libibverbs.so.1" (the runtime package's name; libibverbs.so comes only with -dev).
std::string ibverbs_library_path();

// Opens path and resolves every required function. On failure returns null and puts the reason
// in *error (the library's dlerror, or every missing symbol by name); nothing is printed, the
// caller logs it.
std::unique_ptr<IbvLibrary> load_ibverbs(const std::string& path, std::string* error);

}  // namespace zipccl::verbs
