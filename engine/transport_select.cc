#include "transport_select.h"

#include <string>

#include "log.h"
#include "engine_params.h"
#include "socket_transport.h"
#ifdef ZIPCCL_HAVE_IB
#include "ib_transport.h"
#endif

namespace zipccl {

std::unique_ptr<Transport> select_transport() {
  const TransportKind kind = transport_kind();
  if (kind == TransportKind::kSocket) return tcp::make_socket_transport();
  std::string why;
#ifdef ZIPCCL_HAVE_IB
  if (std::unique_ptr<Transport> ib = verbs::make_ib_transport(&why)) return ib;
#else
  why = "built without <infiniband/verbs.h>";
#endif
  if (kind == TransportKind::kIb) {
    ZIP_WARN("NCCL_ZIP_TRANSPORT=ib but no RDMA device is usable: %s", why.c_str());
    return nullptr;
  }
  ZIP_INFO(NCCL_INIT | NCCL_NET, "no RDMA device usable (%s): using the socket transport", why.c_str());
  return tcp::make_socket_transport();
}

}  // namespace zipccl
