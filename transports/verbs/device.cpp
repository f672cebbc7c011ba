#include "device.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "link.h"

namespace conduit::verbs {

namespace {

std::string memlock_text() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return "";
  return ": RLIMIT_MEMLOCK is " + std::to_string(limit.rlim_cur) +
         " bytes; raise it (ulimit -l unlimited, or the container's memlock limit) or grant CAP_IPC_LOCK";
}

}  // namespace

Error errno_error(const std::string& what, int err) {
  const std::string text = what + ": " + std::strerror(err);
  switch (err) {
    case ENOMEM:
      return make_error(ErrorCode::ResourceExhausted, text + memlock_text());
    case EACCES:
    case EPERM:
      return make_error(ErrorCode::Unavailable,
                        text +
                            " (no permission: mount /dev/infiniband into the container and allow its device "
                            "nodes, or run with the rights to open them)");
    case EOPNOTSUPP:
    case ENOSYS:
    case EPROTONOSUPPORT:
      return make_error(ErrorCode::Unsupported, text);
    case EFAULT:
      return make_error(ErrorCode::InvalidArgument, text + " (the address range is not mapped)");
    default:
      return make_error(ErrorCode::Provider, text);
  }
}

bool runs_rc(const ibv_device& device) { return device.transport_type == IBV_TRANSPORT_IB; }

Result<std::shared_ptr<Device>> Device::open(ibv_device* device, const VerbsOptions& options) {
  std::shared_ptr<Device> d(new Device());
  d->name_ = ibv_get_device_name(device);
  const std::string where = d->name_ + " port " + std::to_string(options.port);

  errno = 0;
  ibv_context* context = ibv_open_device(device);
  if (context == nullptr)
    return errno_error("ibv_open_device(" + d->name_ + ")", errno != 0 ? errno : ENODEV);
  d->context_.reset(context);

  ibv_device_attr device_attr{};
  if (int rc = ibv_query_device(context, &device_attr); rc != 0) {
    return errno_error("ibv_query_device(" + d->name_ + ")", rc);
  }
  if (options.port > device_attr.phys_port_cnt) {
    return make_error(ErrorCode::NotFound, d->name_ + " has no port " + std::to_string(options.port) +
                                               " (it has " + std::to_string(device_attr.phys_port_cnt) + ")");
  }
  ibv_port_attr port_attr{};
  if (int rc = ibv_query_port(context, static_cast<std::uint8_t>(options.port), &port_attr); rc != 0) {
    return errno_error("ibv_query_port(" + where + ")", rc);
  }
  if (port_attr.state != IBV_PORT_ACTIVE) {
    return make_error(ErrorCode::Unavailable, where + " is not active (state " +
                                                  ibv_port_state_str(port_attr.state) +
                                                  "): the link is down or the port is not configured");
  }

  RailInfo& info = d->info_;
  info.device = d->name_;
  info.port = static_cast<std::uint8_t>(options.port);
  info.mtu = static_cast<std::uint8_t>(port_attr.active_mtu);
  info.max_rd_atomic = static_cast<std::uint8_t>(
      std::clamp(std::min(device_attr.max_qp_rd_atom, device_attr.max_qp_init_rd_atom), 1, 16));
  info.link_layer =
      port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::Ethernet : LinkLayer::InfiniBand;
  if (info.link_layer == LinkLayer::InfiniBand) {
    info.lid = port_attr.lid;
    if (info.lid == 0) {
      return make_error(ErrorCode::Unavailable, where + " has no LID (is a subnet manager running?)");
    }
    const int index = options.gid_index >= 0 ? options.gid_index : 0;
    ibv_gid gid{};
    errno = 0;
    if (int rc = ibv_query_gid(context, static_cast<std::uint8_t>(options.port), index, &gid); rc != 0) {
      return errno_error("ibv_query_gid(" + where + ", index " + std::to_string(index) + ")",
                         errno != 0 ? errno : EINVAL);
    }
    info.gid_index = static_cast<std::uint8_t>(index);
    std::memcpy(info.gid.data(), gid.raw, 16);
    d->gid_why_ =
        "GID " + std::to_string(index) + " " + format_gid(info.gid) + ", LID " + std::to_string(info.lid);
  } else {
    std::vector<GidEntry> table = read_gid_table(options.sysfs_root, d->name_, options.port);
    if (table.empty()) {
      // No sysfs (a container without /sys/class/infiniband): ask the library for the same table.
      for (int i = 0; i < port_attr.gid_tbl_len; ++i) {
        ibv_gid_entry entry{};
        if (ibv_query_gid_ex(context, static_cast<std::uint32_t>(options.port), static_cast<std::uint32_t>(i),
                             &entry, 0) != 0) {
          continue;
        }
        GidEntry e;
        e.index = i;
        std::memcpy(e.gid.data(), entry.gid.raw, 16);
        e.type = entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? GidType::RoceV2 : GidType::IbRoceV1;
        if (!is_zero(e.gid)) table.push_back(e);
      }
    }
    auto choice = select_gid(table, LinkLayer::Ethernet, options.gid_index);
    if (!choice) return make_error(ErrorCode::Unavailable, where + ": " + choice.error().message);
    info.gid_index = static_cast<std::uint8_t>(choice->entry.index);
    info.gid = choice->entry.gid;
    d->gid_why_ = choice->why;
  }
  d->max_message_ = port_attr.max_msg_sz;
  d->max_qp_wr_ = static_cast<std::uint32_t>(device_attr.max_qp_wr);

  errno = 0;
  ibv_pd* pd = ibv_alloc_pd(context);
  if (pd == nullptr) return errno_error("ibv_alloc_pd(" + d->name_ + ")", errno != 0 ? errno : ENOMEM);
  d->pd_.reset(pd);

  errno = 0;
  ibv_comp_channel* channel = ibv_create_comp_channel(context);
  if (channel == nullptr) {
    return errno_error("ibv_create_comp_channel(" + d->name_ + ")", errno != 0 ? errno : ENOMEM);
  }
  d->channel_.reset(channel);
  // The progress thread drains events without blocking, then sleeps in poll() on this fd.
  const int flags = fcntl(channel->fd, F_GETFL);
  if (flags < 0 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return errno_error("fcntl(completion channel of " + d->name_ + ")", errno);
  }

  // Queues are pinned memory too: with a tiny memlock limit this is where opening fails, so fail here,
  // with the reason, rather than at the first connection.
  if (auto cq = d->create_cq(1); !cq) return cq.error();

  // The driver either implements DMA-BUF registration (and rejects fd -1 as a bad fd) or says it does not.
  errno = 0;
  if (ibv_mr* probe = ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE); probe != nullptr) {
    ibv_dereg_mr(probe);
    d->dmabuf_ = true;
  } else {
    d->dmabuf_ = errno != EOPNOTSUPP && errno != ENOSYS && errno != EPROTONOSUPPORT;
  }
  return d;
}

Result<MrPtr> Device::register_host(void* address, std::uint64_t length, int access) const {
  errno = 0;
  ibv_mr* mr = ibv_reg_mr(pd_.get(), address, length, access);
  if (mr == nullptr) {
    return errno_error("ibv_reg_mr of " + std::to_string(length) + " bytes on " + name_,
                       errno != 0 ? errno : ENOMEM);
  }
  return MrPtr(mr);
}

Result<MrPtr> Device::register_dmabuf(int fd, std::uint64_t fd_offset, std::uint64_t length,
                                      std::uint64_t iova, int access) const {
  if (!dmabuf_) {
    return make_error(ErrorCode::Unsupported, name_ + "'s driver does not implement ibv_reg_dmabuf_mr");
  }
  errno = 0;
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd_.get(), fd_offset, length, iova, fd, access);
  if (mr == nullptr) {
    return errno_error("ibv_reg_dmabuf_mr of " + std::to_string(length) + " bytes on " + name_,
                       errno != 0 ? errno : ENOMEM);
  }
  return MrPtr(mr);
}

Result<CqPtr> Device::create_cq(int entries) const {
  errno = 0;
  ibv_cq* cq = ibv_create_cq(context_.get(), entries, nullptr, channel_.get(), 0);
  if (cq == nullptr) {
    return errno_error("ibv_create_cq(" + std::to_string(entries) + " entries on " + name_ + ")",
                       errno != 0 ? errno : ENOMEM);
  }
  return CqPtr(cq);
}

Result<QpPtr> Device::create_qp(ibv_cq* cq, std::uint32_t sq_depth) const {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = sq_depth;
  init.cap.max_recv_wr = 1;  // one-sided only: the receive queue stays empty
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;  // selective signaling (send_queue.h)
  errno = 0;
  ibv_qp* raw = ibv_create_qp(pd_.get(), &init);
  if (raw == nullptr) {
    return errno_error("ibv_create_qp(RC, " + std::to_string(sq_depth) + " send WRs on " + name_ + ")",
                       errno != 0 ? errno : ENOMEM);
  }
  QpPtr qp(raw);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = info_.port;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (int rc = ibv_modify_qp(qp.get(), &attr,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      rc != 0) {
    return errno_error("ibv_modify_qp(INIT) on " + name_, rc);
  }
  return qp;
}

Status Device::connect_qp(ibv_qp* qp, std::uint32_t own_psn, const RailInfo& peer, std::uint32_t peer_qpn,
                          std::uint32_t peer_psn, const VerbsOptions& options) const {
  if (peer.link_layer != info_.link_layer) {
    return make_error(ErrorCode::InvalidArgument, "peer rail " + peer.device + " is " +
                                                      std::string(to_string(peer.link_layer)) + ", " + name_ +
                                                      " is " + std::string(to_string(info_.link_layer)));
  }
  auto mtu = negotiate_mtu(info_.mtu, peer.mtu);
  if (!mtu) return mtu.error();

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(*mtu);
  attr.dest_qp_num = peer_qpn;
  attr.rq_psn = peer_psn;
  attr.max_dest_rd_atomic = info_.max_rd_atomic;  // responder resources for the peer's reads
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = info_.port;
  attr.ah_attr.sl = options.service_level;
  const bool other_subnet = !std::equal(peer.gid.begin(), peer.gid.begin() + 8, info_.gid.begin());
  if (info_.link_layer == LinkLayer::Ethernet || other_subnet) {
    // RoCE always routes by GID; InfiniBand only needs the GRH to leave its subnet.
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, peer.gid.data(), 16);
    attr.ah_attr.grh.sgid_index = info_.gid_index;
    attr.ah_attr.grh.hop_limit = info_.link_layer == LinkLayer::Ethernet ? 64 : 255;
    attr.ah_attr.grh.traffic_class = options.traffic_class;
  }
  if (info_.link_layer == LinkLayer::InfiniBand) attr.ah_attr.dlid = peer.lid;
  if (int rc = ibv_modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      rc != 0) {
    return errno_error(
        "ibv_modify_qp(RTR) on " + name_ + " toward " + peer.device + " QPN " + std::to_string(peer_qpn), rc);
  }

  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = options.ack_timeout;
  attr.retry_cnt = options.retry_count;
  attr.rnr_retry = 7;
  attr.sq_psn = own_psn;
  attr.max_rd_atomic = std::min(info_.max_rd_atomic, peer.max_rd_atomic);  // our reads in flight
  if (int rc = ibv_modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
      rc != 0) {
    return errno_error("ibv_modify_qp(RTS) on " + name_, rc);
  }
  return {};
}

}  // namespace conduit::verbs
