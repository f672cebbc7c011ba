// The source end of a transfer on one transport: a registration of the source range, or, where the
// transport cannot take the (CUDA) source memory, a staged source whose pinned bounce slots are registered
// instead (docs/gpu.md). One per (transfer, transport). A run walks each target's range through it in
// segments and sends each segment as one batch; this side knows nothing of batches, retries or targets.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "conduit/common/result.h"
#include "conduit/transport.h"
#include "transfer/staged/staged_source.h"

namespace conduit::agent {

class SourcePath {
 public:
  // One segment of a range, ready to go out as one batch: range offsets [offset, +length), whose local
  // side is `local` at `local_offset`.
  struct Segment {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    const Registration* local = nullptr;
    std::uint64_t local_offset = 0;
  };
  using Send = std::function<Status(const Segment&)>;

  // [range_offset, +length) of `memory` on `transport`, on `rails`. Staged where the memory is CUDA and
  // the transport cannot register it: slots of at most one segment, and never below one slice. Errors
  // say which of the two failed.
  static Result<SourcePath> open(const MemoryRegion& memory, Transport& transport, std::uint64_t range_offset,
                                 std::uint64_t length, std::uint64_t slice_bytes, std::uint64_t segment_bytes,
                                 std::span<const std::uint32_t> rails);

  const Transport* transport() const { return transport_; }
  bool staged() const { return stage_ != nullptr; }
  // The direct registration of the range (range offsets are its offsets); empty when staged.
  const Registration& registration() const { return registration_; }

  // [begin, end) of the range in order, `segment_bytes` at most each (a staged source: one slot each),
  // calling send() for every segment: directly, or with the slot filled from the device before (writes)
  // or copied to it after (reads), the copy of the next segment overlapping this one on the wire. The
  // first error ends the walk: send()'s own, else the staging's.
  Status walk(OpKind op, std::uint64_t begin, std::uint64_t end, std::uint64_t segment_bytes,
              const Send& send) const;

 private:
  Transport* transport_ = nullptr;
  std::uint64_t range_offset_ = 0;
  Registration registration_;            // direct
  std::unique_ptr<StagedSource> stage_;  // staged
};

}  // namespace conduit::agent
