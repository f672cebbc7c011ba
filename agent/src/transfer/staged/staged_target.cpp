#include "transfer/staged/staged_target.h"

#include "conduit/cuda_device.h"

namespace conduit::agent {

namespace {

Status check(const Region& region, std::uint64_t offset, std::uint64_t length) {
  if (offset > region.bytes() || length > region.bytes() - offset || length == 0) {
    return make_error(ErrorCode::InvalidArgument, "range [" + std::to_string(offset) + ", +" +
                                                      std::to_string(length) + ") is outside region " +
                                                      region.name() + " (" + std::to_string(region.bytes()) +
                                                      " bytes)");
  }
  return {};
}

}  // namespace

Status StagingBuffer::to_device(std::uint64_t offset, std::uint64_t length) const {
  if (auto s = check(*region_, offset, length); !s) return s;
  return cuda::copy_to_device(region_->memory(), offset, host_.bytes().subspan(offset, length));
}

Status StagingBuffer::to_host(std::uint64_t offset, std::uint64_t length) const {
  if (auto s = check(*region_, offset, length); !s) return s;
  return cuda::copy_to_host(region_->memory(), offset, host_.bytes().subspan(offset, length));
}

Result<std::shared_ptr<StagingBuffer>> StagingTable::acquire(const RegionPtr& region) {
  std::lock_guard lock(mu_);
  if (auto it = buffers_.find(region->name()); it != buffers_.end()) {
    // Same name, same region: a region with grants cannot be deleted and made anew under the name.
    if (auto live = it->second.lock(); live && &live->region() == region.get()) return live;
  }
  std::erase_if(buffers_, [](const auto& entry) { return entry.second.expired(); });
  auto host = cuda::allocate_pinned(region->bytes());
  if (!host) {
    return make_error(host.error().code,
                      "region " + region->name() + " is CUDA memory this transport cannot " +
                          "register, and its " + std::to_string(region->bytes()) +
                          "-byte host staging buffer could not be allocated: " + host.error().message);
  }
  auto buffer = std::make_shared<StagingBuffer>(region, std::move(*host));
  buffers_[region->name()] = buffer;
  return buffer;
}

std::shared_ptr<StagingBuffer> StagingTable::find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = buffers_.find(name);
  return it == buffers_.end() ? nullptr : it->second.lock();
}

}  // namespace conduit::agent
