// One rail's RDMA device: context, protection domain, completion channel, the port's attributes and the
// GID it sources packets from; registration in its PD; RC queue pairs created and brought to RTS.
// Shared-owned so that a Registration or a connection outliving the transport still releases its MRs and
// QPs before the PD and context go.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

#include "conduit/common/result.h"
#include "conduit/verbs.h"
#include "handshake.h"
#include "ib_handles.h"

namespace conduit::verbs {

// errno of an ibv_* call as an Error: ENOMEM names the memlock limit, EACCES/EPERM the device permission,
// EOPNOTSUPP is Unsupported.
Error errno_error(const std::string& what, int err);

// Devices rdma-core can run RC queue pairs on (InfiniBand and RoCE; not EFA, not iWARP).
bool runs_rc(const ibv_device& device);

class Device {
 public:
  static Result<std::shared_ptr<Device>> open(ibv_device* device, const VerbsOptions& options);

  const std::string& name() const { return name_; }
  ibv_context* context() const { return context_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  ibv_comp_channel* channel() const { return channel_.get(); }
  const RailInfo& info() const { return info_; }  // what the handshake tells peers about this rail
  const std::string& gid_why() const { return gid_why_; }
  std::uint64_t max_message() const { return max_message_; }
  std::uint32_t max_qp_wr() const { return max_qp_wr_; }
  bool dmabuf() const { return dmabuf_; }  // the driver implements ibv_reg_dmabuf_mr

  Result<MrPtr> register_host(void* address, std::uint64_t length, int access) const;
  Result<MrPtr> register_dmabuf(int fd, std::uint64_t fd_offset, std::uint64_t length, std::uint64_t iova,
                                int access) const;

  Result<CqPtr> create_cq(int entries) const;
  // An RC QP on `cq` with `sq_depth` send WRs, selective signaling, moved to INIT with remote read/write.
  Result<QpPtr> create_qp(ibv_cq* cq, std::uint32_t sq_depth) const;
  // INIT -> RTR -> RTS against the peer's rail and QP: the lower MTU, GRH on RoCE (and across IB subnets).
  Status connect_qp(ibv_qp* qp, std::uint32_t own_psn, const RailInfo& peer, std::uint32_t peer_qpn,
                    std::uint32_t peer_psn, const VerbsOptions& options) const;

 private:
  Device() = default;

  std::string name_;
  RailInfo info_;
  std::string gid_why_;
  std::uint64_t max_message_ = 0;
  std::uint32_t max_qp_wr_ = 0;
  bool dmabuf_ = false;
  // Released in reverse: PD and channel before the context.
  ContextPtr context_;
  ChannelPtr channel_;
  PdPtr pd_;
};

}  // namespace conduit::verbs
