// The implementations behind conduit/cuda_device.h, chosen per process by dispatch.cpp: `backend` is the
// real one (driver.cpp + memory.cpp with CUDA headers, stub.cpp without), `host_double` stands in host
// memory for a device when CONDUIT_CUDA_HOST_DOUBLE=1 (tests of the staged path on machines without a GPU).
#pragma once

#include <cstdint>
#include <string>

#include "conduit/cuda_device.h"
#include "conduit/cuda_staging.h"

#define CONDUIT_CUDA_API_DECLARATIONS                                                                       \
  const Availability& availability();                                                                       \
  Status check_device(int device);                                                                          \
  Result<MemoryRegion> allocate(int device, std::uint64_t bytes);                                           \
  Result<MemoryRegion> import_ipc(std::span<const std::byte> handle, std::uint64_t bytes, int device);      \
  Result<std::vector<std::byte>> export_ipc(const MemoryRegion& region);                                    \
  Result<MemoryRegion> allocate_pinned(std::uint64_t bytes);                                                \
  Status export_dmabuf(MemoryRegion& region);                                                               \
  Status copy_to_host(const MemoryRegion& device, std::uint64_t offset, std::span<std::byte> host);         \
  Status copy_to_device(const MemoryRegion& device, std::uint64_t offset, std::span<const std::byte> host); \
  Result<std::unique_ptr<DeviceCopier>> make_copier(const MemoryRegion& device_region, int slots);          \
  Result<CopyBandwidth> measure_copy_bandwidth(int device, std::uint64_t bytes, int rounds);

namespace conduit::cuda {
// Both implementations refuse what is not CUDA memory, or a range outside it, alike.
inline Status check_range(const MemoryRegion& region, std::uint64_t offset, std::uint64_t length) {
  if (region.kind() != MemoryKind::Cuda || region.data() == nullptr) {
    return make_error(ErrorCode::InvalidArgument, "not a CUDA memory region");
  }
  if (offset > region.size() || length > region.size() - offset) {
    return make_error(ErrorCode::InvalidArgument, "range [" + std::to_string(offset) + ", +" +
                                                      std::to_string(length) + ") is outside the " +
                                                      std::to_string(region.size()) + "-byte CUDA region");
  }
  return {};
}

namespace backend {
CONDUIT_CUDA_API_DECLARATIONS
}  // namespace backend
namespace host_double {
bool enabled();  // CONDUIT_CUDA_HOST_DOUBLE=1 in the environment, read once
CONDUIT_CUDA_API_DECLARATIONS
}  // namespace host_double
}  // namespace conduit::cuda
