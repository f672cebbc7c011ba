#include "transfer/staged/source_path.h"

#include <algorithm>
#include <string>

namespace conduit::agent {

namespace {

// Each staged source holds two slots of this much pinned memory; each slot's segment is one batch.
constexpr std::uint64_t kMaxStageSlot = 32ULL << 20;

}  // namespace

Result<SourcePath> SourcePath::open(const MemoryRegion& memory, Transport& transport,
                                    std::uint64_t range_offset, std::uint64_t length,
                                    std::uint64_t slice_bytes, std::uint64_t segment_bytes,
                                    std::span<const std::uint32_t> rails) {
  SourcePath path;
  path.transport_ = &transport;
  path.range_offset_ = range_offset;
  if (memory.kind() == MemoryKind::Cuda && !transport.capabilities().device_memory) {
    const std::uint64_t slot =
        std::min(length, std::max(slice_bytes, std::min(segment_bytes, kMaxStageSlot)));
    auto s = StagedSource::open(memory, transport, slot, {}, {}, {rails.begin(), rails.end()});
    if (!s) {
      return make_error(s.error().code, "staging the CUDA source through host memory on " +
                                            std::string(transport.name()) + ": " + s.error().message);
    }
    path.stage_ = std::move(*s);
    return path;
  }
  auto reg = transport.register_memory(memory, Access::Local, range_offset, length, rails);
  if (!reg) return make_error(reg.error().code, "registering the source range: " + reg.error().message);
  path.registration_ = std::move(*reg);
  return path;
}

Status SourcePath::walk(OpKind op, std::uint64_t begin, std::uint64_t end, std::uint64_t segment_bytes,
                        const Send& send) const {
  if (stage_ == nullptr) {
    // The registration starts at the range, so range offsets are its offsets.
    for (std::uint64_t pos = begin; pos < end;) {
      const std::uint64_t n = std::min(segment_bytes, end - pos);
      if (auto s = send(Segment{pos, n, &registration_, pos}); !s) return s;
      pos += n;
    }
    return {};
  }
  const auto direction = op == OpKind::Write ? cuda::StageDirection::Outbound : cuda::StageDirection::Inbound;
  // Device offsets are the region's; range offsets start at range_offset_.
  return stage_->run(direction, range_offset_ + begin, range_offset_ + end, [&](const cuda::StagePiece& p) {
    return send(Segment{p.offset - range_offset_, p.length, &stage_->registration(), p.slot_offset});
  });
}

}  // namespace conduit::agent
