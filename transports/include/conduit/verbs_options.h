// The native ibverbs backend's settings (conduit/verbs.h), apart from the backend so that
// TransportConfig can carry them without the seam depending on rdma-core. The caller fills them: the agent
// from its options, conduit-bench from its flags (conduit/data_plane_settings.h parses both).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::verbs {

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

  // InvalidArgument ("ibverbs: send queue depth must be 2..32768") for a value out of range: what open()
  // and probe() check before touching a device.
  Status validate() const;
};

}  // namespace conduit::verbs
