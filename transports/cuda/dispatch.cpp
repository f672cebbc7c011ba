// conduit/cuda_device.h's entry points: the real CUDA backend (or the "built without CUDA" stub), or the
// host double where CONDUIT_CUDA_HOST_DOUBLE=1 asks for it (tests only; backend.h).
#include "backend.h"

namespace conduit::cuda {

#define CONDUIT_CUDA_DISPATCH(call) return host_double::enabled() ? host_double::call : backend::call

const Availability& availability() { CONDUIT_CUDA_DISPATCH(availability()); }
Status check_device(int device) { CONDUIT_CUDA_DISPATCH(check_device(device)); }
Result<MemoryRegion> allocate(int device, std::uint64_t bytes) {
  CONDUIT_CUDA_DISPATCH(allocate(device, bytes));
}
Result<MemoryRegion> import_ipc(std::span<const std::byte> handle, std::uint64_t bytes, int device) {
  CONDUIT_CUDA_DISPATCH(import_ipc(handle, bytes, device));
}
Result<std::vector<std::byte>> export_ipc(const MemoryRegion& region) {
  CONDUIT_CUDA_DISPATCH(export_ipc(region));
}
Result<MemoryRegion> allocate_pinned(std::uint64_t bytes) { CONDUIT_CUDA_DISPATCH(allocate_pinned(bytes)); }
Status export_dmabuf(MemoryRegion& region) { CONDUIT_CUDA_DISPATCH(export_dmabuf(region)); }
Status copy_to_host(const MemoryRegion& device, std::uint64_t offset, std::span<std::byte> host) {
  CONDUIT_CUDA_DISPATCH(copy_to_host(device, offset, host));
}
Status copy_to_device(const MemoryRegion& device, std::uint64_t offset, std::span<const std::byte> host) {
  CONDUIT_CUDA_DISPATCH(copy_to_device(device, offset, host));
}
Result<std::unique_ptr<DeviceCopier>> make_copier(const MemoryRegion& device_region, int slots) {
  CONDUIT_CUDA_DISPATCH(make_copier(device_region, slots));
}
Result<CopyBandwidth> measure_copy_bandwidth(int device, std::uint64_t bytes, int rounds) {
  CONDUIT_CUDA_DISPATCH(measure_copy_bandwidth(device, bytes, rounds));
}

#undef CONDUIT_CUDA_DISPATCH

}  // namespace conduit::cuda
