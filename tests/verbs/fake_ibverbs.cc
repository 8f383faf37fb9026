// Stand-in libibverbs for the loader tests: empty functions under the names the loader looks up
// (never called). ZIP_FAKE_OMIT_CREATE_QP builds one that lacks ibv_create_qp.
#define ZIP_FAKE(name) \
  extern "C" __attribute__((visibility("default"))) void name() {}

ZIP_FAKE(ibv_fork_init)
ZIP_FAKE(ibv_get_device_list)
ZIP_FAKE(ibv_free_device_list)
ZIP_FAKE(ibv_get_device_name)
ZIP_FAKE(ibv_open_device)
ZIP_FAKE(ibv_close_device)
ZIP_FAKE(ibv_get_async_event)
ZIP_FAKE(ibv_ack_async_event)
ZIP_FAKE(ibv_query_device)
ZIP_FAKE(ibv_query_port)
ZIP_FAKE(ibv_query_gid)
ZIP_FAKE(ibv_query_qp)
ZIP_FAKE(ibv_alloc_pd)
ZIP_FAKE(ibv_dealloc_pd)
ZIP_FAKE(ibv_reg_mr)
ZIP_FAKE(ibv_dereg_mr)
ZIP_FAKE(ibv_create_cq)
ZIP_FAKE(ibv_destroy_cq)
#ifndef ZIP_FAKE_OMIT_CREATE_QP
ZIP_FAKE(ibv_create_qp)
#endif
ZIP_FAKE(ibv_modify_qp)
ZIP_FAKE(ibv_destroy_qp)
ZIP_FAKE(ibv_event_type_str)
ZIP_FAKE(ibv_wc_status_str)
ZIP_FAKE(ibv_reg_mr_iova2)
