// What the exported verbs share: their linkage and the error conventions of rdma-core (int
// verbs return an errno value, pointer verbs return null and set errno).
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>

#define ZIP_EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace zipccl::verbs::emu {

template <typename T>
T* fail_null(int err) {
  errno = err;
  return nullptr;
}

// The context's ops table (verbs.h's inline data-path calls go through it).
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

}  // namespace zipccl::verbs::emu
