// CUDA device memory for Conduit: what this process can do with CUDA, device allocations and imports as
// MemoryRegions of kind Cuda, pinned host bounce memory, DMA-BUF export of a device range, and copies.
//
// The driver API is loaded at run time (dlopen of libcuda.so.1), so a build with CUDA runs on machines
// without a GPU; a build without CUDA headers compiles a stub. Either way every call answers with a reason a
// person can act on ("this agent was built without CUDA", "no CUDA driver (libcuda.so.1 not found)",
// "no CUDA device 1: this node has 1"), never a crash or a bare error number.
//
// Each executable links exactly one implementation of these functions, chosen when it is linked
// (transports/CMakeLists.txt): transports/cuda/driver.cpp + memory.cpp where CUDA headers were found, else
// transports/cuda/stub.cpp. Only test executables link another one (a stand-in device of host memory, in
// tests/doubles/); nothing at run time can switch a binary to it.
//
// Which driver library is loaded is the caller's value (set_driver_library), never read from the
// environment here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/memory_region.h"

namespace conduit::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;        // "NVIDIA H200"
  std::string pci_bus_id;  // "0000:1b:00.0", as sysfs writes it
  std::uint64_t memory_bytes = 0;
  bool dmabuf = false;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
};

struct Availability {
  bool built = false;      // compiled with CUDA headers
  bool driver = false;     // libcuda.so.1 loaded and cuInit succeeded
  int driver_version = 0;  // 12040 = 12.4
  std::vector<DeviceInfo> devices;
  std::string reason;  // empty when usable; otherwise why CUDA memory is not available here
  bool usable() const { return driver && !devices.empty(); }
};

// The driver library availability() and every call below load: libcuda.so.1, wherever the loader finds it,
// unless the process names another before its first CUDA call (conduit-agent's --cuda-driver: a node whose
// loader does not search where the driver is, as a self-contained bundle's own loader may not; a missing
// file gives the no-driver reason). The driver is loaded once per process, so naming a different library
// after that is Conflict; naming the one loaded is fine. Builds without a driver (the stub, test doubles)
// keep the name and load nothing.
inline constexpr const char* kDefaultDriverLibrary = "libcuda.so.1";
Status set_driver_library(const std::string& path);

// Probed once per process (thread-safe) and cached: the driver does not come or go while we run.
const Availability& availability();

// OK when `device` can be used; Unsupported naming the reason otherwise ("no CUDA device 0: no CUDA driver
// (libcuda.so.1 not found)"). What the agent answers 422 with.
Status check_device(int device);

// cuMemAlloc on `device` (its primary context). ResourceExhausted when the device is out of memory.
Result<MemoryRegion> allocate(int device, std::uint64_t bytes);

// A CUDA IPC handle (cuIpcGetMemHandle's 64 bytes) from a local process, opened with cuIpcOpenMemHandle on
// `device`; the region closes the mapping when destroyed. The exporter must keep its allocation alive.
inline constexpr std::size_t kIpcHandleBytes = 64;
Result<MemoryRegion> import_ipc(std::span<const std::byte> handle, std::uint64_t bytes, int device);
// The IPC handle of a region this process allocated (for tests and local producers).
Result<std::vector<std::byte>> export_ipc(const MemoryRegion& region);

// Page-locked host memory (cuMemHostAlloc, portable): a MemoryRegion of kind Host whose copies to and from
// any device run at full DMA speed. Used for bounce buffers and host staging.
Result<MemoryRegion> allocate_pinned(std::uint64_t bytes);

// Exports the whole allocation behind a Cuda region as a DMA-BUF (cuMemGetHandleForAddressRange over the
// host-page-aligned range around it) and attaches it to the region (MemoryRegion::dmabuf_fd()). allocate()
// and import_ipc() try this themselves where the device supports DMA-BUF; Unsupported with the driver's
// text where it does not (then registration falls back to nvidia-peermem or the staged path).
Status export_dmabuf(MemoryRegion& region);

// Synchronous copies between [offset, +bytes) of a Cuda region and host memory.
Status copy_to_host(const MemoryRegion& device, std::uint64_t offset, std::span<std::byte> host);
Status copy_to_device(const MemoryRegion& device, std::uint64_t offset, std::span<const std::byte> host);

// Measured pinned host<->device bandwidth on `device` (bytes per second), `bytes` per direction, best of
// `rounds`: what cudaMemcpy between pinned memory and the device reaches, for comparison with transfers.
struct CopyBandwidth {
  double host_to_device = 0;
  double device_to_host = 0;
  double device_to_device = 0;
};
Result<CopyBandwidth> measure_copy_bandwidth(int device, std::uint64_t bytes, int rounds);

// InvalidArgument unless `region` is CUDA memory and [offset, +length) lies inside it: what every
// implementation answers for such a range, alike.
Status check_device_range(const MemoryRegion& region, std::uint64_t offset, std::uint64_t length);

}  // namespace conduit::cuda
