// The native rdma-core backend ("ibverbs"): RC queue pairs on InfiniBand or RoCE devices, RDMA WRITE and
// READ, selected with TransportConfig::provider = "ibverbs" (libfabric's "verbs" is a different backend).
//
// Everything a Transport user needs goes through conduit/transport.h; this header adds only the knobs
// that have no place in TransportConfig and the availability probe the agent reports in /v1/node.
//
// Memory: host regions are registered with ibv_reg_mr. A Cuda region is registered with
// ibv_reg_dmabuf_mr when it carries a DMA-BUF (MemoryRegion::dmabuf_fd() >= 0: the fd exports the
// region's memory and dmabuf_offset() is where data() lies in it; the region's creator owns the fd),
// otherwise with ibv_reg_mr on the device address, which works only where nvidia-peermem is loaded.
// Either way peers address the range by its virtual address (RemoteKey::base) and the MR's rkey.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/transport.h"

namespace conduit::verbs {

inline constexpr const char* kProviderName = "ibverbs";

struct VerbsOptions {
  // Devices by name ("mlx5_0"), one per rail in rail order (rails beyond the list reuse it round-robin).
  // Empty: the RC-capable devices nearest `near` (conduit/nic_choice.h over the sysfs topology).
  std::vector<std::string> devices;
  // A GPU's PCI address ("0000:1b:00.0") or "numa:N": the memory the rails should sit next to. Empty: any.
  std::string near;
  int port = 1;
  int gid_index = -1;               // -1: RoCE v2 with an IPv4-mapped address first (see link.h); IB: index 0
  std::uint32_t qps_per_peer = 2;   // RC queue pairs to each peer on each rail; slices spread over them
  std::uint32_t sq_depth = 128;     // send queue depth of each QP: never more WRs outstanding than this
  std::uint32_t signal_every = 16;  // request a completion on every Nth WR (and the last of each post)
  std::uint8_t traffic_class = 0;   // RoCE: the GRH traffic class (DSCP << 2)
  std::uint8_t service_level = 0;   // InfiniBand: the SL
  std::uint8_t ack_timeout = 14;    // local ACK timeout 4.096 us * 2^n (14: ~67 ms)
  std::uint8_t retry_count = 7;     // transport retries before IBV_WC_RETRY_EXC_ERR
  // "IP" or "IP:PORT" the connection handshake listens on. Empty: TransportConfig::bind_address, else the
  // IPv4 address of the chosen RoCE GID, else the first non-loopback IPv4 interface; port 0 = any.
  std::string listen;
  std::string sysfs_root = "/sys";  // for topology and the GID table

  // Defaults overridden by CONDUIT_IB_DEVICES (comma list), CONDUIT_IB_NEAR, CONDUIT_IB_PORT,
  // CONDUIT_IB_GID_INDEX, CONDUIT_IB_QPS_PER_PEER, CONDUIT_IB_SQ_DEPTH, CONDUIT_IB_SIGNAL_EVERY,
  // CONDUIT_IB_TRAFFIC_CLASS, CONDUIT_IB_SL, CONDUIT_IB_TIMEOUT, CONDUIT_IB_RETRY_COUNT, CONDUIT_IB_LISTEN.
  // InvalidArgument naming the variable when one does not parse or is out of range.
  static Result<VerbsOptions> from_environment();
  Status validate() const;
};

// Opens the backend: devices, protection domains, the handshake listener and one progress thread per rail.
// Unavailable with the reason when this machine cannot run it: "no RDMA device (ibv_get_device_list found
// none)", a permission or memlock problem, a port that is down.
Result<std::unique_ptr<Transport>> open(const TransportConfig& config, const VerbsOptions& options);

// Whether open() could work here, without keeping anything open: OK, or Unavailable with the same reason
// open() would give. Cheap enough for every GET /v1/node.
Status probe(const VerbsOptions& options);

}  // namespace conduit::verbs
