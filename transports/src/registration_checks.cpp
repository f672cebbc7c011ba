#include "registration_checks.h"

#include <string>

namespace conduit {

Result<std::uint64_t> registration_length(const MemoryRegion& region, std::uint64_t offset,
                                          std::uint64_t length) {
  if (length == Transport::kWholeRegion) length = offset <= region.size() ? region.size() - offset : 0;
  if (offset > region.size() || length > region.size() - offset || length == 0) {
    return make_error(ErrorCode::InvalidArgument, "range [" + std::to_string(offset) + ", +" +
                                                      std::to_string(length) + ") is outside the " +
                                                      std::to_string(region.size()) + "-byte region");
  }
  return length;
}

Status check_memory_kind(const MemoryRegion& region, const Capabilities& caps, std::string_view name) {
  if (region.kind() != MemoryKind::Cuda || caps.device_memory) return {};
  return make_error(ErrorCode::Unsupported,
                    std::string(name) + " cannot register CUDA memory directly (gpuDirect: " +
                        std::string(to_string(caps.gpu_path)) +
                        (caps.gpu_path_detail.empty() ? "" : ": " + caps.gpu_path_detail) + ")");
}

}  // namespace conduit
