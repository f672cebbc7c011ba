// Which way this backend reaches CUDA memory, found by trying as the libfabric backend does
// (../src/gpu_probe.h): the probe buffer registered on rail 0 through its DMA-BUF, then by device address
// (nvidia-peermem). The CUDA calls go through conduit/cuda_device.h, which is a stub in builds without
// CUDA, so this backend never needs CUDA to build.
#include "../src/gpu_probe.h"

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
  const Device& device = *devices_.front();
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  auto registered = [](const Result<MrPtr>& mr) -> Status {
    if (!mr) return mr.error();
    return {};
  };
  probe_gpu_path(
      caps_,
      [&](const MemoryRegion& probe) {
        return registered(device.register_dmabuf(probe.dmabuf_fd(), probe.dmabuf_offset(), probe.size(),
                                                 reinterpret_cast<std::uint64_t>(probe.data()), access));
      },
      [&](const MemoryRegion& probe) {
        return registered(device.register_host(probe.data(), probe.size(), access));
      },
      "nvidia-peermem");
}

}  // namespace conduit::verbs
