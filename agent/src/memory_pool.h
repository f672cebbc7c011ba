// The host memory of deleted regions, zeroed and kept for the next region of the same size.
//
// Why: a new region's pages must be faulted in and zeroed by the kernel, and a job that makes its target
// region pays that while the wire needs the same CPUs. On the 2-core development machine a new GiB cost
// 0.2 s, and 1.1 s once memory was full of page cache (the kernel compacts memory for each huge page),
// where the wire moves that GiB in 0.2 s; zeroing a GiB that is already faulted in takes 14-48 ms. The
// common case is a region replaced by one of the same size (a checkpoint's next version, a job run again),
// so the memory a region gives back is zeroed by a thread of the pool and handed, already faulted in, to
// the next host region whose size rounds to the same number of huge pages (one still being zeroed is waited
// for, one not yet begun is zeroed by the taker). Memory is handed out only once zeroed: no region ever
// sees another's bytes.
//
// Bounded: at most `max_bytes` held, a block unused for `keep` is unmapped (an idle agent gives its memory
// back), and the region store has blocks unmapped when a fresh allocation needs their room under its cap.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "conduit/memory_region.h"

namespace conduit::agent {

class MemoryPool {
 public:
  // Below this, a region's memory is not kept: faulting it in costs little and blocks would be many.
  static constexpr std::uint64_t kMinBytes = 2u << 20;

  MemoryPool(std::uint64_t max_bytes, std::chrono::milliseconds keep);
  ~MemoryPool();  // stops the zeroing thread; every block held is unmapped
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Zeroed, faulted-in host memory of `bytes` whose release gives it back; nullopt when no block of that
  // size (in huge pages) is held.
  std::optional<MemoryRegion> take(std::uint64_t bytes);
  // `memory` (host memory from MemoryRegion::allocate_host) wrapped so that its release gives it back
  // here; returned as it is when it is too small to keep or the pool keeps nothing.
  MemoryRegion keep(MemoryRegion memory);
  // Unmaps blocks, those not yet zeroed first, then the least recently given back, until at most `bytes`
  // are held.
  void shrink_to(std::uint64_t bytes);

  std::uint64_t held_bytes() const;    // zeroed or waiting to be
  std::uint64_t reused_count() const;  // regions made from kept memory since start

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace conduit::agent
