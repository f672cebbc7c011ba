#include "conduit/memory_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace conduit {

std::string_view to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::Host:
      return "host";
    case MemoryKind::Cuda:
      return "cuda";
    case MemoryKind::FileMapped:
      return "file";
  }
  return "unknown";
}

namespace {

constexpr std::size_t kHugePage = MemoryRegion::kHugePage;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Faults [p, +bytes) in with MADV_POPULATE_WRITE one huge page at a time: false where the kernel lacks it.
// Each call holds the process's mmap lock, and a huge page may need the kernel to compact memory first (on
// a machine whose memory is full of page cache, 1 GiB took 1-2 s instead of 0.09 s). In one call for the
// whole range, every mmap, munmap and thread start of the agent waited for it: a new region's creation, a
// grant's registration, a job's first byte (measured: up to 1.2 s). One huge page per call lets them in
// between.
bool populate_range(void* p, std::size_t bytes, const std::atomic<bool>* stop = nullptr) {
  auto* at = static_cast<char*>(p);
  for (std::size_t done = 0; done < bytes; done += kHugePage) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return true;
    if (madvise(at + done, std::min(kHugePage, bytes - done), MADV_POPULATE_WRITE) != 0) return false;
  }
  return true;
}

// Faults [p, +bytes) in from a thread of its own, so that freeing the memory stops it within one huge page.
// Where the kernel lacks MADV_POPULATE_WRITE the pages fault in as they are first written: touching them
// from here instead would overwrite bytes that may have landed.
class BackgroundPopulate {
 public:
  BackgroundPopulate(void* p, std::size_t bytes)
      : thread_([this, p, bytes] { populate_range(p, bytes, &stop_); }) {}
  ~BackgroundPopulate() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

Result<MemoryRegion> MemoryRegion::allocate_host(std::size_t bytes, Populate populate) {
  if (bytes == 0) return make_error(ErrorCode::InvalidArgument, "cannot allocate an empty memory region");
  MemoryRegion region;
  region.kind_ = MemoryKind::Host;
  region.bytes_ = bytes;

  // Reserved huge pages first: fewer TLB misses and fewer pages to pin at registration. Failing here is the
  // common case (nothing reserved in /proc/sys/vm/nr_hugepages) and not an error.
  std::size_t mapped = round_up(bytes, kHugePage);
  void* p = MAP_FAILED;
  if (bytes >= kHugePage) {
    p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
    region.huge_pages_ = p != MAP_FAILED;
  }
  if (p == MAP_FAILED && bytes >= kHugePage) {
    // Transparent huge pages need a 2 MiB-aligned range: map one huge page more and trim both ends to it
    // (an unaligned 1 GiB + 1 byte region got none, and faulted in at 1-2 s instead of 0.15 s).
    void* raw = mmap(nullptr, mapped + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw != MAP_FAILED) {
      const auto base = reinterpret_cast<std::uintptr_t>(raw);
      const std::uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
      if (aligned > base) munmap(raw, aligned - base);
      const std::uintptr_t tail = base + mapped + kHugePage - (aligned + mapped);
      if (tail > 0) munmap(reinterpret_cast<void*>(aligned + mapped), tail);
      p = reinterpret_cast<void*>(aligned);
    }
  }
  if (p == MAP_FAILED) {
    mapped = round_up(bytes, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
    p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return make_error(ErrorCode::Unavailable,
                        "mmap of " + std::to_string(bytes) + " bytes failed: " + std::strerror(errno));
    }
  }
  if (!region.huge_pages_) {  // reserved huge pages came populated (MAP_POPULATE)
    if (bytes >= kHugePage) madvise(p, mapped, MADV_HUGEPAGE);  // best effort transparent huge pages
    if (populate == Populate::Background) {
      region.address_ = p;
      try {
        auto populating = std::make_shared<BackgroundPopulate>(p, mapped);
        // The thread stops (and is joined) before the memory goes.
        region.release_ = [p, mapped, populating]() mutable {
          populating.reset();
          munmap(p, mapped);
        };
        return region;
      } catch (const std::system_error&) {
        // No thread to be had: fault the pages in here instead.
      }
    }
    // Fault every page in now, at creation, rather than inside the first transfer into the region
    // (measured: a first write into a fresh 1 GiB region ran at 0.3 GB/s on tcp, later ones at 4).
    // After the madvise, so the faults can take transparent huge pages. MADV_POPULATE_WRITE does it in the
    // kernel (1 GiB: 0.16 s against 1.1 s touching a byte per page, measured on the 2-core dev machine);
    // touching is the fallback for kernels before 5.14.
    if (!populate_range(p, mapped)) {
      const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
      for (std::size_t at = 0; at < mapped; at += page) static_cast<volatile char*>(p)[at] = 0;
    }
  }
  region.address_ = p;
  region.release_ = [p, mapped] { munmap(p, mapped); };
  return region;
}

MemoryRegion MemoryRegion::borrow(MemoryKind kind, void* address, std::size_t bytes, int device,
                                  std::function<void()> release, bool huge_pages) {
  MemoryRegion region;
  region.kind_ = kind;
  region.huge_pages_ = huge_pages;
  region.address_ = address;
  region.bytes_ = bytes;
  region.device_ = device;
  region.release_ = std::move(release);
  return region;
}

MemoryRegion::MemoryRegion(MemoryRegion&& other) noexcept { *this = std::move(other); }

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
  if (this != &other) {
    reset();
    kind_ = other.kind_;
    address_ = std::exchange(other.address_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    huge_pages_ = other.huge_pages_;
    dmabuf_fd_ = std::exchange(other.dmabuf_fd_, -1);
    dmabuf_offset_ = other.dmabuf_offset_;
    release_ = std::exchange(other.release_, {});
  }
  return *this;
}

MemoryRegion::~MemoryRegion() { reset(); }

void MemoryRegion::attach_dmabuf(int fd, std::uint64_t offset) {
  if (dmabuf_fd_ >= 0) ::close(dmabuf_fd_);
  dmabuf_fd_ = fd;
  dmabuf_offset_ = offset;
}

void MemoryRegion::reset() {
  // The DMA-BUF first: it references the device memory that release_ frees.
  if (dmabuf_fd_ >= 0) ::close(std::exchange(dmabuf_fd_, -1));
  if (release_) release_();
  release_ = {};
  address_ = nullptr;
  bytes_ = 0;
}

std::span<std::byte> MemoryRegion::bytes() const {
  if (kind_ == MemoryKind::Cuda || address_ == nullptr) return {};
  return {static_cast<std::byte*>(address_), bytes_};
}

}  // namespace conduit
