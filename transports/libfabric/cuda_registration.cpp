// Which way this provider reaches CUDA memory, found by trying: a transport that claimed GPU-direct from
// fi_getinfo's FI_HMEM bit alone would fail at the first real grant (Debian's libfabric advertises FI_HMEM
// on shm without any CUDA support).
#include <rdma/fi_domain.h>

#include "conduit/cuda_device.h"
#include "libfabric_transport.h"

namespace conduit::fabric {

void LibfabricTransport::probe_gpu() {
  caps_.device_memory = false;
  caps_.gpu_path = GpuPath::Staged;
  constexpr std::uint64_t kProbeBytes = 2ULL << 20;
  auto region = cuda::allocate(0, kProbeBytes);
  if (!region) {
    caps_.gpu_path_detail = "probe allocation on CUDA device 0: " + region.error().message;
    return;
  }
  const std::uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  Endpoint& endpoint = *rails_.front()->endpoint();
  std::string why;
  if (region->dmabuf_fd() >= 0) {
    Endpoint::Hmem hmem{0, region->dmabuf_fd(), region->dmabuf_offset()};
    auto mr = endpoint.register_range(region->data(), kProbeBytes, access, &hmem);
    if (mr) {
      caps_.device_memory = true;
      caps_.gpu_path = GpuPath::Dmabuf;
      caps_.gpu_path_detail.clear();
      return;
    }
    why = "dmabuf: " + mr.error().message;
  } else {
    why = "dmabuf: CUDA device 0 exported no DMA-BUF";
  }
  Endpoint::Hmem hmem{0, -1, 0};
  auto mr = endpoint.register_range(region->data(), kProbeBytes, access, &hmem);
  if (mr) {
    caps_.device_memory = true;
    caps_.gpu_path = GpuPath::Peermem;
    caps_.gpu_path_detail = why;
    return;
  }
  caps_.gpu_path_detail = why + "; by device address (FI_HMEM_CUDA): " + mr.error().message;
}

}  // namespace conduit::fabric
