// The double-buffered staging schedule (no CUDA here: copies go through a DeviceCopier) and the CRC32C of
// device ranges.
#include <algorithm>
#include <string>

#include "conduit/crc32c.h"
#include "conduit/cuda_device.h"
#include "conduit/cuda_staging.h"

namespace conduit::cuda {

std::vector<StagePiece> stage_pieces(const StagePlan& plan) {
  std::vector<StagePiece> pieces;
  if (plan.slot_bytes == 0 || plan.slots < 1 || plan.end <= plan.begin) return pieces;
  pieces.reserve((plan.end - plan.begin + plan.slot_bytes - 1) / plan.slot_bytes);
  for (std::uint64_t at = plan.begin; at < plan.end; at += plan.slot_bytes) {
    StagePiece p;
    p.index = pieces.size();
    p.slot = static_cast<int>(p.index % static_cast<std::uint64_t>(plan.slots));
    p.offset = at;
    p.length = std::min(plan.slot_bytes, plan.end - at);
    p.slot_offset = static_cast<std::uint64_t>(p.slot) * plan.slot_bytes;
    pieces.push_back(p);
  }
  return pieces;
}

namespace {

// Waits for every slot, so no copy touches the bounce memory once the run returns; keeps `first` if set.
Status drain(DeviceCopier& copier, int slots, Status first) {
  for (int s = 0; s < slots; ++s) {
    auto w = copier.wait(s);
    if (first && !w) first = w;
  }
  return first;
}

// A host buffer of `bytes` that device memory is copied through: pinned where the driver gives it (the
// copy engine reads it directly), plain memory where pinning fails. `bytes` views whichever it is.
struct HostStage {
  Result<MemoryRegion> pinned;
  std::vector<std::byte> plain;
  std::span<std::byte> bytes;

  explicit HostStage(std::uint64_t size) : pinned(allocate_pinned(size)) {
    if (pinned) {
      bytes = pinned->bytes();
    } else {
      plain.resize(size);
      bytes = plain;
    }
  }
};

}  // namespace

Status run_staged(StageDirection direction, const StagePlan& plan, std::span<std::byte> bounce,
                  DeviceCopier& copier, const StageNetwork& network) {
  if (plan.slot_bytes == 0 || plan.slots < 1) {
    return make_error(ErrorCode::InvalidArgument, "staging needs at least one slot of at least one byte");
  }
  if (bounce.size() / plan.slot_bytes < static_cast<std::uint64_t>(plan.slots)) {
    return make_error(ErrorCode::InvalidArgument, "bounce buffer of " + std::to_string(bounce.size()) +
                                                      " bytes is smaller than " + std::to_string(plan.slots) +
                                                      " slots of " + std::to_string(plan.slot_bytes));
  }
  const std::vector<StagePiece> pieces = stage_pieces(plan);
  if (pieces.empty()) return {};
  auto slot_of = [&](const StagePiece& p) { return bounce.subspan(p.slot_offset, p.length); };

  if (direction == StageDirection::Outbound) {
    // Copy k+1 into its slot while piece k is on the wire. Its slot last held piece k+1-slots, whose
    // network() returned before this iteration began.
    if (auto s = copier.start_to_host(pieces[0].slot, pieces[0].offset, slot_of(pieces[0])); !s) {
      return drain(copier, plan.slots, s);
    }
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      const StagePiece& p = pieces[k];
      if (auto s = copier.wait(p.slot); !s) return drain(copier, plan.slots, s);
      if (k + 1 < pieces.size()) {
        const StagePiece& next = pieces[k + 1];
        if (next.slot != p.slot) {
          if (auto s = copier.start_to_host(next.slot, next.offset, slot_of(next)); !s) {
            return drain(copier, plan.slots, s);
          }
        }
      }
      if (auto s = network(p); !s) return drain(copier, plan.slots, s);
      // One slot only: nothing could overlap; fill it again now that its piece has left.
      if (k + 1 < pieces.size() && pieces[k + 1].slot == p.slot) {
        const StagePiece& next = pieces[k + 1];
        if (auto s = copier.start_to_host(next.slot, next.offset, slot_of(next)); !s) {
          return drain(copier, plan.slots, s);
        }
      }
    }
    return {};
  }

  // Inbound: piece k lands in its slot while piece k-1 is copied to the device. The slot's previous copy
  // (piece k-slots) must have ended before the network may write into it again.
  for (const StagePiece& p : pieces) {
    if (auto s = copier.wait(p.slot); !s) return drain(copier, plan.slots, s);
    if (auto s = network(p); !s) return drain(copier, plan.slots, s);
    if (auto s = copier.start_to_device(p.slot, p.offset, slot_of(p)); !s)
      return drain(copier, plan.slots, s);
  }
  return drain(copier, plan.slots, {});
}

Result<std::vector<std::uint32_t>> region_crc32c_slices(const MemoryRegion& region, std::uint64_t offset,
                                                        std::uint64_t length, std::uint64_t slice) {
  if (slice == 0) return make_error(ErrorCode::InvalidArgument, "slice must be at least 1 byte");
  if (offset > region.size() || length > region.size() - offset) {
    return make_error(ErrorCode::InvalidArgument, "range [" + std::to_string(offset) + ", +" +
                                                      std::to_string(length) + ") is outside the " +
                                                      std::to_string(region.size()) + "-byte region");
  }
  if (region.kind() != MemoryKind::Cuda) {
    const auto bytes = region.bytes();
    if (bytes.empty() && length > 0) {
      return make_error(ErrorCode::Unsupported, "the region's memory is not readable from the host");
    }
    return crc32c_slices(bytes.subspan(offset, length), slice);
  }

  // Device memory: copy through one pinned buffer (plain memory if pinning fails) and chain the CRC of
  // each slice across buffer boundaries.
  constexpr std::uint64_t kPiece = 64ULL << 20;
  const std::uint64_t piece = std::min(kPiece, std::max<std::uint64_t>(length, 1));
  HostStage stage(piece);
  const std::span<std::byte> buffer = stage.bytes;
  std::vector<std::uint32_t> out;
  out.reserve(length / slice + 1);
  std::uint32_t current = 0;
  std::uint64_t in_slice = 0;
  for (std::uint64_t at = 0; at < length;) {
    const std::uint64_t n = std::min(piece, length - at);
    if (auto s = copy_to_host(region, offset + at, buffer.first(n)); !s) return s.error();
    for (std::uint64_t i = 0; i < n;) {
      const std::uint64_t take = std::min(slice - in_slice, n - i);
      current = crc32c(buffer.subspan(i, take), current);
      in_slice += take;
      i += take;
      if (in_slice == slice) {
        out.push_back(current);
        current = 0;
        in_slice = 0;
      }
    }
    at += n;
  }
  if (in_slice > 0) out.push_back(current);
  return out;
}

Result<std::uint32_t> region_crc32c_ranges(const MemoryRegion& region, std::span<const CrcRange> ranges) {
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const CrcRange& r = ranges[i];
    if (r.offset > region.size() || r.length > region.size() - r.offset) {
      return make_error(ErrorCode::InvalidArgument, "range " + std::to_string(i) + " [" +
                                                        std::to_string(r.offset) + ", +" +
                                                        std::to_string(r.length) + ") is outside the " +
                                                        std::to_string(region.size()) + "-byte region");
    }
    largest = std::max(largest, r.length);
  }
  std::uint32_t crc = 0;
  if (region.kind() != MemoryKind::Cuda) {
    const auto bytes = region.bytes();
    if (bytes.empty() && largest > 0) {
      return make_error(ErrorCode::Unsupported, "the region's memory is not readable from the host");
    }
    for (const CrcRange& r : ranges) crc = crc32c(bytes.subspan(r.offset, r.length), crc);
    return crc;
  }

  // Device memory: each range copied to one pinned buffer (plain memory if pinning fails) in pieces.
  constexpr std::uint64_t kPiece = 64ULL << 20;
  const std::uint64_t piece = std::min(kPiece, std::max<std::uint64_t>(largest, 1));
  HostStage stage(piece);
  const std::span<std::byte> buffer = stage.bytes;
  for (const CrcRange& r : ranges) {
    for (std::uint64_t at = 0; at < r.length;) {
      const std::uint64_t n = std::min(piece, r.length - at);
      if (auto s = copy_to_host(region, r.offset + at, buffer.first(n)); !s) return s.error();
      crc = crc32c(buffer.first(n), crc);
      at += n;
    }
  }
  return crc;
}

}  // namespace conduit::cuda
