// A stand-in CUDA device made of host memory: this file implements conduit/cuda_device.h for test
// executables that link it instead of the driver (tests/CMakeLists.txt, CONDUIT_CUDA_DEVICE), so the staged
// path runs end to end (two agents, real tcp) on machines without a GPU. Every "device" region is host
// memory labelled Cuda whose bytes() stay empty, so callers must go through the copies as with a GPU. It
// says what it is wherever CUDA is reported (the device is named "host double").
#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "conduit/cuda_device.h"
#include "conduit/cuda_staging.h"

namespace conduit::cuda {

namespace {

constexpr std::uint64_t kDeviceBytes = 64ULL << 30;

std::byte* at(const MemoryRegion& region, std::uint64_t offset) {
  return static_cast<std::byte*>(region.data()) + offset;
}

class AsyncCopier final : public DeviceCopier {
 public:
  AsyncCopier(const MemoryRegion& region, int slots)
      : region_(region), pending_(static_cast<std::size_t>(slots)) {}
  ~AsyncCopier() override {
    for (auto& p : pending_) {
      if (p.valid()) p.wait();
    }
  }
  Status start_to_host(int slot, std::uint64_t offset, std::span<std::byte> host) override {
    if (auto s = begin(slot, offset, host.size()); !s) return s;
    const std::byte* src = at(region_, offset);
    pending_[slot] =
        std::async(std::launch::async, [src, host] { std::memcpy(host.data(), src, host.size()); });
    return {};
  }
  Status start_to_device(int slot, std::uint64_t offset, std::span<const std::byte> host) override {
    if (auto s = begin(slot, offset, host.size()); !s) return s;
    std::byte* dst = at(region_, offset);
    pending_[slot] =
        std::async(std::launch::async, [dst, host] { std::memcpy(dst, host.data(), host.size()); });
    return {};
  }
  Status wait(int slot) override {
    if (slot < 0 || static_cast<std::size_t>(slot) >= pending_.size()) {
      return make_error(ErrorCode::InvalidArgument, "no staging slot " + std::to_string(slot));
    }
    if (pending_[slot].valid()) pending_[slot].get();
    return {};
  }

 private:
  Status begin(int slot, std::uint64_t offset, std::uint64_t length) {
    if (slot < 0 || static_cast<std::size_t>(slot) >= pending_.size()) {
      return make_error(ErrorCode::InvalidArgument, "no staging slot " + std::to_string(slot));
    }
    if (pending_[slot].valid()) {
      return make_error(ErrorCode::InvalidArgument,
                        "slot " + std::to_string(slot) + " still has a copy in flight");
    }
    return check_device_range(region_, offset, length);
  }

  const MemoryRegion& region_;
  std::vector<std::future<void>> pending_;
};

}  // namespace

const Availability& availability() {
  static const Availability a{
      true, true, 0, {DeviceInfo{0, "host double (a test build)", "", kDeviceBytes, false}}, ""};
  return a;
}

Status check_device(int device) {
  if (device == 0) return {};
  return make_error(ErrorCode::Unsupported,
                    "no CUDA device " + std::to_string(device) + ": this node has 1 (cuda:0..0)");
}

Result<MemoryRegion> allocate(int device, std::uint64_t bytes) {
  if (auto s = check_device(device); !s) return s.error();
  auto host = MemoryRegion::allocate_host(bytes);
  if (!host) return host.error();
  auto owner = std::make_shared<MemoryRegion>(std::move(*host));
  return MemoryRegion::borrow(MemoryKind::Cuda, owner->data(), bytes, device, [owner] {});
}

Result<MemoryRegion> import_ipc(std::span<const std::byte>, std::uint64_t, int) {
  return make_error(ErrorCode::Unsupported, "the CUDA host double has no IPC handles");
}

Result<std::vector<std::byte>> export_ipc(const MemoryRegion&) {
  return make_error(ErrorCode::Unsupported, "the CUDA host double has no IPC handles");
}

Result<MemoryRegion> allocate_pinned(std::uint64_t bytes) { return MemoryRegion::allocate_host(bytes); }

Status export_dmabuf(MemoryRegion&) {
  return make_error(ErrorCode::Unsupported, "the CUDA host double has no DMA-BUF");
}

Status copy_to_host(const MemoryRegion& device, std::uint64_t offset, std::span<std::byte> host) {
  if (auto s = check_device_range(device, offset, host.size()); !s) return s;
  std::memcpy(host.data(), at(device, offset), host.size());
  return {};
}

Status copy_to_device(const MemoryRegion& device, std::uint64_t offset, std::span<const std::byte> host) {
  if (auto s = check_device_range(device, offset, host.size()); !s) return s;
  std::memcpy(at(device, offset), host.data(), host.size());
  return {};
}

Result<std::unique_ptr<DeviceCopier>> make_copier(const MemoryRegion& device_region, int slots) {
  if (auto s = check_device_range(device_region, 0, 0); !s) return s.error();
  if (slots < 1) return make_error(ErrorCode::InvalidArgument, "a copier needs at least one slot");
  return std::unique_ptr<DeviceCopier>(std::make_unique<AsyncCopier>(device_region, slots));
}

Result<CopyBandwidth> measure_copy_bandwidth(int device, std::uint64_t bytes, int rounds) {
  auto dev = allocate(device, bytes);
  if (!dev) return dev.error();
  auto host = allocate_pinned(bytes);
  if (!host) return host.error();
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = copy_to_device(*dev, 0, host->bytes()); !s) return s.error();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (secs > 0) best = std::max(best, static_cast<double>(bytes) / secs);
  }
  return CopyBandwidth{best, best, best};
}

}  // namespace conduit::cuda
