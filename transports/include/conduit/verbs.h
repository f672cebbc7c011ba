// The native rdma-core backend ("ibverbs"): RC queue pairs on InfiniBand or RoCE devices, RDMA WRITE and
// READ, selected with TransportConfig::provider = "ibverbs" (libfabric's "verbs" is a different backend).
//
// Everything a Transport user needs goes through conduit/transport.h (its settings are
// TransportConfig::ibverbs, conduit/verbs_options.h); this header adds only the backend's own entry points
// and the availability probe the agent reports in /v1/node.
//
// Memory: host regions are registered with ibv_reg_mr. A Cuda region is registered with
// ibv_reg_dmabuf_mr when it carries a DMA-BUF (MemoryRegion::dmabuf_fd() >= 0: the fd exports the
// region's memory and dmabuf_offset() is where data() lies in it; the region's creator owns the fd),
// otherwise with ibv_reg_mr on the device address, which works only where nvidia-peermem is loaded.
// Either way peers address the range by its virtual address (RemoteKey::base) and the MR's rkey.
#pragma once

#include <memory>

#include "conduit/common/result.h"
#include "conduit/transport.h"
#include "conduit/verbs_options.h"

namespace conduit::verbs {

inline constexpr const char* kProviderName = "ibverbs";

// Opens the backend with `options` (open_transport passes TransportConfig::ibverbs): devices, protection
// domains, the handshake listener and one progress thread per rail. Unavailable with the reason when this
// machine cannot run it: "no RDMA device (ibv_get_device_list found none)", a permission or memlock problem,
// a port that is down.
Result<std::unique_ptr<Transport>> open(const TransportConfig& config, const VerbsOptions& options);

// Whether open() could work here, without keeping anything open: OK, or Unavailable with the same reason
// open() would give. Cheap enough for every GET /v1/node.
Status probe(const VerbsOptions& options);

}  // namespace conduit::verbs
