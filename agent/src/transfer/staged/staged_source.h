// The local end of a transfer whose region is CUDA memory the transport cannot register (gpuDirect:
// staged): two pinned host bounce slots registered with that transport, a CUDA stream copier, and the
// double-buffered schedule of conduit/cuda_staging.h. One per (transfer, transport).
#pragma once

#include <cstdint>
#include <memory>

#include "conduit/cuda_staging.h"
#include "conduit/transport.h"

namespace conduit::agent {

class StagedSource {
 public:
  // Bounce slots of `slot_bytes` (2 of them) registered with `transport` for local use. `copier` replaces
  // the CUDA one (tests); `bounce` replaces the pinned allocation (tests; must hold 2 * slot_bytes).
  // `rails`: the rails to register the slots on (those nearest the device; empty = every rail).
  static Result<std::unique_ptr<StagedSource>> open(const MemoryRegion& device, Transport& transport,
                                                    std::uint64_t slot_bytes,
                                                    std::unique_ptr<cuda::DeviceCopier> copier = {},
                                                    MemoryRegion bounce = {},
                                                    std::vector<std::uint32_t> rails = {});

  static constexpr int kSlots = 2;
  std::uint64_t slot_bytes() const { return slot_bytes_; }
  // The bounce buffer's registration: ops use it with local_offset = StagePiece::slot_offset.
  const Registration& registration() const { return registration_; }

  // [begin, end) of the device region, piece by piece: Outbound for a write (device -> slot -> network),
  // Inbound for a read (network -> slot -> device).
  Status run(cuda::StageDirection direction, std::uint64_t begin, std::uint64_t end,
             const cuda::StageNetwork& network);

 private:
  StagedSource() = default;
  // Declared so the registration goes before the memory it registers, and the copier (whose copies may
  // target the bounce memory) is drained with it.
  MemoryRegion bounce_;
  std::unique_ptr<cuda::DeviceCopier> copier_;
  Registration registration_;
  std::uint64_t slot_bytes_ = 0;
};

}  // namespace conduit::agent
