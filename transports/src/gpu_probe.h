// Which way a backend reaches CUDA memory, found by trying: a transport that believed a capability bit
// would fail at the first real grant (Debian's libfabric advertises FI_HMEM on shm without any CUDA
// support). A small buffer on CUDA device 0 is registered through its DMA-BUF first (GpuPath::Dmabuf),
// then by device address (Peermem); where neither works the path is Staged, and the detail says why each
// way failed. The backends differ only in how they register, which they pass in.
#pragma once

#include <functional>
#include <string_view>

#include "conduit/common/result.h"
#include "conduit/memory_region.h"
#include "conduit/transport.h"

namespace conduit {

// Registers the whole probe region (and deregisters it before returning); an error says why it failed.
using ProbeRegistration = std::function<Status(const MemoryRegion& probe)>;

// Sets caps.device_memory, caps.gpu_path and caps.gpu_path_detail. `by_dmabuf` is called only where the
// probe buffer exported a DMA-BUF (MemoryRegion::dmabuf_fd()). `address_way` names the by-address way in
// the detail ("FI_HMEM_CUDA", "nvidia-peermem").
void probe_gpu_path(Capabilities& caps, const ProbeRegistration& by_dmabuf,
                    const ProbeRegistration& by_address, std::string_view address_way);

}  // namespace conduit
