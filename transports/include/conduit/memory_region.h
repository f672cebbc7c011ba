// MemoryRegion: a range of memory Conduit can register and move. It owns its backing (or borrows it, for
// memory another component keeps alive), so callers hold one type whatever the memory is: host pages today,
// CUDA device memory and file mappings later, each a new Kind and a new factory, never a new caller API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "conduit/common/result.h"

namespace conduit {

enum class MemoryKind : std::uint8_t { Host, Cuda, FileMapped };

std::string_view to_string(MemoryKind kind);

// When the pages of new host memory are faulted in. Now: before allocate_host returns (a first transfer into
// the region then runs at full speed). Background: a thread faults them in with MADV_POPULATE_WRITE, which
// never changes a byte, so writes may land while it runs and the caller does not wait for gigabytes of page
// faults before its first byte (a pipelined job's target region).
enum class Populate : std::uint8_t { Now, Background };

class MemoryRegion {
 public:
  // Host memory is mapped in whole huge pages of this size (x86-64 and arm64 with 4 KiB base pages), so two
  // sizes that round to the same count of them map the same memory (the agent's region pool relies on it).
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  // Page-aligned anonymous host memory. Uses explicit huge pages when the system has them reserved for a
  // region of at least one huge page, then transparent huge pages, then plain pages, all without error.
  static Result<MemoryRegion> allocate_host(std::size_t bytes, Populate populate = Populate::Now);

  // Memory owned elsewhere (an imported buffer, a kept block); `release` runs when the region is destroyed,
  // may be empty. `huge_pages` says what the memory is backed by, for huge_pages().
  static MemoryRegion borrow(MemoryKind kind, void* address, std::size_t bytes, int device,
                             std::function<void()> release = {}, bool huge_pages = false);

  MemoryRegion() = default;
  MemoryRegion(MemoryRegion&& other) noexcept;
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  ~MemoryRegion();

  MemoryKind kind() const { return kind_; }
  void* data() const { return address_; }
  std::size_t size() const { return bytes_; }
  int device() const { return device_; }  // CUDA ordinal, -1 for host memory
  bool huge_pages() const { return huge_pages_; }

  // Host-accessible bytes; empty for device memory.
  std::span<std::byte> bytes() const;

  // Device memory exported as a DMA-BUF, for ibv_reg_dmabuf_mr / fi_mr_regattr(FI_MR_DMABUF): -1 when it
  // has none. The fd covers the whole allocation and data() lies dmabuf_offset() bytes into it, so the
  // range [offset, +n) of the region is [dmabuf_offset() + offset, +n) of the fd. The region owns the fd.
  int dmabuf_fd() const { return dmabuf_fd_; }
  std::uint64_t dmabuf_offset() const { return dmabuf_offset_; }
  void attach_dmabuf(int fd, std::uint64_t offset);  // takes ownership; closed when the region goes

 private:
  void reset();

  MemoryKind kind_ = MemoryKind::Host;
  void* address_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
  bool huge_pages_ = false;
  int dmabuf_fd_ = -1;
  std::uint64_t dmabuf_offset_ = 0;
  std::function<void()> release_;
};

}  // namespace conduit
