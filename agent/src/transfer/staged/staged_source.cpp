#include "transfer/staged/staged_source.h"

#include "conduit/cuda_device.h"

namespace conduit::agent {

Result<std::unique_ptr<StagedSource>> StagedSource::open(const MemoryRegion& device, Transport& transport,
                                                         std::uint64_t slot_bytes,
                                                         std::unique_ptr<cuda::DeviceCopier> copier,
                                                         MemoryRegion bounce,
                                                         std::vector<std::uint32_t> rails) {
  if (slot_bytes == 0) return make_error(ErrorCode::InvalidArgument, "staging slots must not be empty");
  std::unique_ptr<StagedSource> s(new StagedSource());
  s->slot_bytes_ = slot_bytes;
  if (bounce.data() == nullptr) {
    auto pinned = cuda::allocate_pinned(slot_bytes * kSlots);
    if (!pinned) {
      return make_error(pinned.error().code, "allocating " + std::to_string(slot_bytes * kSlots) +
                                                 " bytes of pinned bounce buffer: " + pinned.error().message);
    }
    bounce = std::move(*pinned);
  }
  if (bounce.size() < slot_bytes * kSlots) {
    return make_error(ErrorCode::InvalidArgument, "bounce buffer is smaller than its slots");
  }
  s->bounce_ = std::move(bounce);
  if (!copier) {
    auto made = cuda::make_copier(device, kSlots);
    if (!made) return made.error();
    copier = std::move(*made);
  }
  s->copier_ = std::move(copier);
  auto reg = transport.register_memory(s->bounce_, Access::Local, 0, slot_bytes * kSlots, rails);
  if (!reg) {
    return make_error(reg.error().code, "registering the bounce buffer: " + reg.error().message);
  }
  s->registration_ = std::move(*reg);
  return s;
}

Status StagedSource::run(cuda::StageDirection direction, std::uint64_t begin, std::uint64_t end,
                         const cuda::StageNetwork& network) {
  const cuda::StagePlan plan{begin, end, slot_bytes_, kSlots};
  return cuda::run_staged(direction, plan, bounce_.bytes(), *copier_, network);
}

}  // namespace conduit::agent
