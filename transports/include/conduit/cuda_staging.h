// The staged path for device memory a provider cannot reach: bytes go through pinned host bounce slots,
// double-buffered so the copy of one piece overlaps the network transfer of the previous one.
//
//   outbound (device memory is the source of a write):   device --copy--> slot k%S --network--> peer
//     copy k+1 runs while piece k is on the wire; slot s is refilled only after its piece left.
//   inbound (device memory receives, e.g. a read):       peer --network--> slot k%S --copy--> device
//     piece k+1 arrives while piece k is copied to the device; slot s is reused only after its copy ended.
//
// The schedule is plain C++ over a DeviceCopier, so tests run it with a host-memory double; the CUDA
// copier (one stream, one event per slot) is make_copier().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/memory_region.h"

namespace conduit::cuda {

// Asynchronous copies between a device region and host slots. At most one copy per slot is in flight:
// start_* on a slot follows a wait() on it (the pipeline guarantees it).
class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  virtual Status start_to_host(int slot, std::uint64_t device_offset, std::span<std::byte> host) = 0;
  virtual Status start_to_device(int slot, std::uint64_t device_offset, std::span<const std::byte> host) = 0;
  // Until the slot's last started copy has ended; its error if it failed. OK when none was started.
  virtual Status wait(int slot) = 0;
};

// A CUDA copier for `device_region` (kind Cuda) with `slots` slots: one stream, one event per slot.
Result<std::unique_ptr<DeviceCopier>> make_copier(const MemoryRegion& device_region, int slots);

enum class StageDirection : std::uint8_t { Outbound, Inbound };

// One piece of the staged range: [offset, +length) of the device range, held in host slot `slot` at
// `slot_offset` bytes into the bounce buffer (slot * slot_bytes).
struct StagePiece {
  std::uint64_t index = 0;
  int slot = 0;
  std::uint64_t offset = 0;  // from the start of the device region
  std::uint64_t length = 0;
  std::uint64_t slot_offset = 0;
};

struct StagePlan {
  std::uint64_t begin = 0;  // device region offsets [begin, end)
  std::uint64_t end = 0;
  std::uint64_t slot_bytes = 0;
  int slots = 2;
};

// The pieces of `plan` in order; piece k sits in slot k % slots.
std::vector<StagePiece> stage_pieces(const StagePlan& plan);

// Runs the double-buffered schedule. `bounce` is the host memory of every slot (slots * slot_bytes
// bytes). `network` moves one piece between its slot and the peer and blocks until that is done (for
// outbound: the bytes have left the slot for good); its error stops the run. Whatever ends the run, no
// copy is still in flight into or out of `bounce` when this returns. The first error wins: a network
// error, else a copy error.
using StageNetwork = std::function<Status(const StagePiece&)>;
Status run_staged(StageDirection direction, const StagePlan& plan, std::span<std::byte> bounce,
                  DeviceCopier& copier, const StageNetwork& network);

// CRC32C per `slice` bytes of [offset, +length) of any region: host bytes directly, device memory copied
// through a pinned buffer piece by piece. What verify and the checksum API use.
Result<std::vector<std::uint32_t>> region_crc32c_slices(const MemoryRegion& region, std::uint64_t offset,
                                                        std::uint64_t length, std::uint64_t slice);

// One range [offset, +length) of a region, for region_crc32c_ranges.
struct CrcRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
// One running CRC32C over `ranges` in the order given: the CRC32C of their bytes put end to end, each range
// chained onto the last through the seed. Host bytes directly; device memory copied through one pinned
// buffer, a range (or a piece of one) at a time. What a verified scatter-gather transfer compares at its
// two ends. InvalidArgument naming the first range outside the region.
Result<std::uint32_t> region_crc32c_ranges(const MemoryRegion& region, std::span<const CrcRange> ranges);

}  // namespace conduit::cuda
