#include "gpu_probe.h"

#include <string>

#include "conduit/cuda_device.h"

namespace conduit {

void probe_gpu_path(Capabilities& caps, const ProbeRegistration& by_dmabuf,
                    const ProbeRegistration& by_address, std::string_view address_way) {
  caps.device_memory = false;
  caps.gpu_path = GpuPath::Staged;
  constexpr std::uint64_t kProbeBytes = 2ULL << 20;
  auto region = cuda::allocate(0, kProbeBytes);
  if (!region) {
    caps.gpu_path_detail = "probe allocation on CUDA device 0: " + region.error().message;
    return;
  }
  std::string why;
  if (region->dmabuf_fd() >= 0) {
    auto ok = by_dmabuf(*region);
    if (ok) {
      caps.device_memory = true;
      caps.gpu_path = GpuPath::Dmabuf;
      caps.gpu_path_detail.clear();
      return;
    }
    why = "dmabuf: " + ok.error().message;
  } else {
    why = "dmabuf: CUDA device 0 exported no DMA-BUF";
  }
  auto ok = by_address(*region);
  if (ok) {
    caps.device_memory = true;
    caps.gpu_path = GpuPath::Peermem;
    caps.gpu_path_detail = why;
    return;
  }
  caps.gpu_path_detail =
      why + "; by device address (" + std::string(address_way) + "): " + ok.error().message;
}

}  // namespace conduit
