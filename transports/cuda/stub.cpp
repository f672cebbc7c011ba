// conduit/cuda_device.h in a build without CUDA headers: each entry point says so, so `cuda:N` is a clear
// 422 rather than a missing feature nobody explains.
#include "conduit/cuda_device.h"
#include "conduit/cuda_staging.h"

namespace conduit::cuda {

namespace {

constexpr const char* kBuiltWithout = "built without CUDA";

Error unsupported() { return make_error(ErrorCode::Unsupported, kBuiltWithout); }

}  // namespace

const Availability& availability() {
  static const Availability a{false, false, 0, {}, kBuiltWithout};
  return a;
}

Status check_device(int device) {
  return make_error(ErrorCode::Unsupported,
                    "no CUDA device " + std::to_string(device) + ": " + kBuiltWithout);
}

Result<MemoryRegion> allocate(int, std::uint64_t) { return unsupported(); }
Result<MemoryRegion> import_ipc(std::span<const std::byte>, std::uint64_t, int) { return unsupported(); }
Result<std::vector<std::byte>> export_ipc(const MemoryRegion&) { return unsupported(); }
Result<MemoryRegion> allocate_pinned(std::uint64_t) { return unsupported(); }
Status export_dmabuf(MemoryRegion&) { return unsupported(); }
Status copy_to_host(const MemoryRegion&, std::uint64_t, std::span<std::byte>) { return unsupported(); }
Status copy_to_device(const MemoryRegion&, std::uint64_t, std::span<const std::byte>) {
  return unsupported();
}
Result<std::unique_ptr<DeviceCopier>> make_copier(const MemoryRegion&, int) { return unsupported(); }
Result<CopyBandwidth> measure_copy_bandwidth(int, std::uint64_t, int) { return unsupported(); }

}  // namespace conduit::cuda
