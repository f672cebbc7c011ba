// The range check the implementations of conduit/cuda_device.h share (the driver's, the test doubles'), so
// each refuses a bad range in the same words.
#include <string>

#include "conduit/cuda_device.h"

namespace conduit::cuda {

Status check_device_range(const MemoryRegion& region, std::uint64_t offset, std::uint64_t length) {
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

}  // namespace conduit::cuda
