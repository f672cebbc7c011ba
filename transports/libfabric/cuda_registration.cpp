// Which way this provider reaches CUDA memory, found by trying (../src/gpu_probe.h): through the probe
// buffer's DMA-BUF, then by device address with FI_HMEM_CUDA, each on rail 0's endpoint.
#include <rdma/fi_domain.h>

#include "../src/gpu_probe.h"
#include "libfabric_transport.h"

namespace conduit::fabric {

void LibfabricTransport::probe_gpu() {
  const std::uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  Endpoint& endpoint = *rails_.front()->endpoint();
  auto register_probe = [&](const MemoryRegion& probe, const Endpoint::Hmem& hmem) -> Status {
    auto mr = endpoint.register_range(probe.data(), probe.size(), access, &hmem);
    if (!mr) return mr.error();
    return {};
  };
  probe_gpu_path(
      caps_,
      [&](const MemoryRegion& probe) {
        return register_probe(probe, Endpoint::Hmem{0, probe.dmabuf_fd(), probe.dmabuf_offset()});
      },
      [&](const MemoryRegion& probe) {
        return register_probe(probe, Endpoint::Hmem{0, -1, 0});
      },
      "FI_HMEM_CUDA");
}

}  // namespace conduit::fabric
