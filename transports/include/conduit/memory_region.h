// MemoryRegion: a range of memory Conduit can register and move. It owns its backing (or borrows it, for
// memory another component keeps alive), so callers hold one type whatever the memory is: host pages today,
// CUDA device memory and file mappings later, each a new Kind and a new factory, never a new caller API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "conduit/result.h"

namespace conduit {

enum class MemoryKind : std::uint8_t { Host, Cuda, FileMapped };

std::string_view to_string(MemoryKind kind);

class MemoryRegion {
 public:
  // Page-aligned anonymous host memory. Uses explicit huge pages when the system has them reserved for a
  // region of at least one huge page, then transparent huge pages, then plain pages, all without error.
  static Result<MemoryRegion> allocate_host(std::size_t bytes);

  // Memory owned elsewhere (an imported buffer); `release` runs when the region is destroyed, may be empty.
  static MemoryRegion borrow(MemoryKind kind, void* address, std::size_t bytes, int device,
                             std::function<void()> release = {});

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

 private:
  void reset();

  MemoryKind kind_ = MemoryKind::Host;
  void* address_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
  bool huge_pages_ = false;
  std::function<void()> release_;
};

}  // namespace conduit
