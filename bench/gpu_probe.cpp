// conduit-gpu-probe: what this machine offers Conduit's CUDA support, and the pinned host<->device copy
// bandwidth to compare transfers with (what cudaMemcpy between cudaHostAlloc'ed memory and the device
// reaches: the same driver copies). For bench/gpu-check.sh; one key=value line per fact.
//   conduit-gpu-probe                      availability; exit 1 with the reason when no device is usable
//   conduit-gpu-probe --bandwidth 1GiB     and the copy bandwidth on device 0 (best of 3)
//   --cuda-driver PATH (else CONDUIT_CUDA_DRIVER): the driver library to load, as the agent's option
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "conduit/common/size.h"
#include "conduit/cuda_device.h"

int main(int argc, char** argv) {
  std::uint64_t bandwidth_bytes = 0;
  const char* env_driver = std::getenv("CONDUIT_CUDA_DRIVER");
  std::string driver =
      env_driver != nullptr && *env_driver != '\0' ? env_driver : conduit::cuda::kDefaultDriverLibrary;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cuda-driver") == 0 && i + 1 < argc) {
      driver = argv[++i];
      continue;
    }
    if (std::strcmp(argv[i], "--bandwidth") == 0 && i + 1 < argc) {
      auto n = conduit::parse_size(argv[++i]);
      if (!n) {
        std::fprintf(stderr, "conduit-gpu-probe: --bandwidth: %s\n", n.error().message.c_str());
        return 2;
      }
      bandwidth_bytes = *n;
    } else {
      std::fprintf(stderr, "usage: conduit-gpu-probe [--bandwidth SIZE] [--cuda-driver PATH]\n");
      return 2;
    }
  }
  if (auto set = conduit::cuda::set_driver_library(driver); !set) {
    std::fprintf(stderr, "conduit-gpu-probe: --cuda-driver: %s\n", set.error().message.c_str());
    return 2;
  }
  const auto& a = conduit::cuda::availability();
  std::printf("cuda built=%d driver=%d driverVersion=%d devices=%zu\n", a.built ? 1 : 0, a.driver ? 1 : 0,
              a.driver_version, a.devices.size());
  for (const auto& d : a.devices) {
    std::printf("device ordinal=%d pciBusId=%s memoryBytes=%llu dmabuf=%d name=%s\n", d.ordinal,
                d.pci_bus_id.c_str(), static_cast<unsigned long long>(d.memory_bytes), d.dmabuf ? 1 : 0,
                d.name.c_str());
  }
  if (!a.usable()) {
    std::printf("error no CUDA device: %s\n", a.reason.c_str());
    return 1;
  }
  if (bandwidth_bytes > 0) {
    auto bw = conduit::cuda::measure_copy_bandwidth(0, bandwidth_bytes, 3);
    if (!bw) {
      std::printf("error copy bandwidth: %s\n", bw.error().message.c_str());
      return 1;
    }
    std::printf("copy bytes=%llu h2d=%.0f d2h=%.0f d2d=%.0f\n",
                static_cast<unsigned long long>(bandwidth_bytes), bw->host_to_device, bw->device_to_host,
                bw->device_to_device);
  }
  return 0;
}
