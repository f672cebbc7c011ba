// Which way this backend reaches CUDA memory, found by trying, as the libfabric backend does: register a
// small device buffer on rail 0 through its DMA-BUF first, then by device address (nvidia-peermem). The
// CUDA calls go through conduit/cuda_device.h, which is a stub in builds without CUDA, so this backend
// never needs CUDA to build.
#include "conduit/cuda_device.h"
#include "verbs_transport.h"

namespace conduit::verbs {

void VerbsTransport::probe_gpu() {
  caps_.device_memory = false;
  const cuda::Availability& gpu = cuda::availability();
  if (!gpu.usable()) {
    caps_.gpu_path = GpuPath::None;
    caps_.gpu_path_detail = gpu.reason;
    return;
  }
  caps_.gpu_path = GpuPath::Staged;
  constexpr std::uint64_t kProbeBytes = 2ULL << 20;
  auto region = cuda::allocate(0, kProbeBytes);
  if (!region) {
    caps_.gpu_path_detail = "probe allocation on CUDA device 0: " + region.error().message;
    return;
  }
  const Device& device = *devices_.front();
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  const auto iova = reinterpret_cast<std::uint64_t>(region->data());
  std::string why;
  if (region->dmabuf_fd() >= 0) {
    auto mr = device.register_dmabuf(region->dmabuf_fd(), region->dmabuf_offset(), kProbeBytes, iova, access);
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
  auto mr = device.register_host(region->data(), kProbeBytes, access);
  if (mr) {
    caps_.device_memory = true;
    caps_.gpu_path = GpuPath::Peermem;
    caps_.gpu_path_detail = why;
    return;
  }
  caps_.gpu_path_detail = why + "; by device address (nvidia-peermem): " + mr.error().message;
}

}  // namespace conduit::verbs
