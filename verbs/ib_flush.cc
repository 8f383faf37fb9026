// The GPUDirect flush, as NCCL's net_ib does it: a 1-byte RDMA read of the device buffer on a
// queue pair connected to itself completes only after the HCA's earlier writes into that buffer
// have reached GPU memory, so NCCL's kernel then reads what arrived.
#include <cerrno>
#include <cstring>

#include "ib_errors.h"
#include "ib_link.h"
#include "ib_qp.h"
#include "log.h"

namespace zipccl::verbs {

ncclResult_t IbLink::create_flush_qp() {
  const IbvFunctions& fn = hca_->fn();
  const char* dev = dev_.c_str();
  flush_cq_ = fn.create_cq(hca_->context(), int(kFlushDepth), nullptr, nullptr, 0);
  if (!flush_cq_) {
    ZIP_WARN("%s: ibv_create_cq(%u) for the GPUDirect flush failed: %s", dev, kFlushDepth, std::strerror(errno));
    return ncclSystemError;
  }
  hca_->watch(flush_cq_, err_);
  flush_qp_ = create_rc_qp(fn, hca_->pd(), flush_cq_, kFlushDepth, 1, dev);
  if (!flush_qp_) return ncclSystemError;
  hca_->watch(flush_qp_, err_);
  ZIP_CHECK(qp_to_init(fn, flush_qp_, port_, dev));
  const QpPath path{port_, attr_.link_layer, gid_index_, gid_, attr_.active_mtu, traffic_class_};
  QpPeer self{flush_qp_->qp_num, attr_.lid, {}};
  std::memcpy(self.gid, gid_, 16);
  return qp_to_rts(fn, flush_qp_, path, self, dev);
}

ncclResult_t IbLink::flush(const void* data, Xfer* x) {
  if (err_->code() != ncclSuccess) return err_->code();
  if (!flush_qp_ || flushes_.size() >= kFlushDepth)
    return fail_with(ncclInternalError, flush_qp_ ? "too many flushes in flight" : "flush of memory not registered for it");
  MrRef mr;  // the buffer's registration, held until the read is done
  if (mrs_->acquire(data, 1, &mr) != ncclSuccess) return fail_with(ncclSystemError, "could not register a flushed buffer");
  ibv_sge sge{reinterpret_cast<uintptr_t>(&local_->flush_sink), 1, local_mr_->lkey};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data);
  wr.wr.rdma.rkey = mr.rkey();
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(flush_qp_, &wr, &bad))
    return fail_with(ncclSystemError, std::string("ibv_post_send (flush) failed: ") + std::strerror(e));
  x->pending.store(1, std::memory_order_relaxed);
  flushes_.push_back(FlushOp{x, std::move(mr)});
  return ncclSuccess;
}

ncclResult_t IbLink::on_flush_completion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS)
    return fail_with(completion_error_code(wc.status), "GPUDirect flush failed: " + describe_completion_error(hca_->fn(), wc));
  if (flushes_.empty()) return fail_with(ncclInternalError, "completion for no flush");
  flushes_.front().x->pending.store(0, std::memory_order_release);
  flushes_.pop_front();
  return ncclSuccess;
}

}  // namespace zipccl::verbs
