// RAII owners for rdma-core handles. Each is released by exactly one owner; owners are declared in
// dependency order (context, channel, pd, cq, qp / mr) so destruction tears down QPs and MRs before the
// CQ and PD they use, and those before the context, with no explicit cleanup on error paths.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

namespace conduit::verbs {

struct IbDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
  void operator()(ibv_context* context) const { ibv_close_device(context); }
  void operator()(ibv_comp_channel* channel) const { ibv_destroy_comp_channel(channel); }
  void operator()(ibv_pd* pd) const { ibv_dealloc_pd(pd); }
  void operator()(ibv_cq* cq) const { ibv_destroy_cq(cq); }
  void operator()(ibv_qp* qp) const { ibv_destroy_qp(qp); }
  void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); }
};

using DeviceListPtr = std::unique_ptr<ibv_device*, IbDeleter>;
using ContextPtr = std::unique_ptr<ibv_context, IbDeleter>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, IbDeleter>;
using PdPtr = std::unique_ptr<ibv_pd, IbDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, IbDeleter>;
using QpPtr = std::unique_ptr<ibv_qp, IbDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, IbDeleter>;

}  // namespace conduit::verbs
