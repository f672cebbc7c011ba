// Device allocations, IPC imports, pinned host memory, DMA-BUF export, copies and the stream copier, over
// the dlopen'ed driver.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "conduit/cuda_device.h"
#include "conduit/cuda_staging.h"
#include "driver.h"

namespace conduit::cuda {

using backend::driver;
using backend::Driver;
using backend::error;
using backend::use_device;

namespace {

CUdeviceptr device_pointer(const MemoryRegion& region, std::uint64_t offset) {
  return reinterpret_cast<CUdeviceptr>(region.data()) + offset;
}

// The loaded driver with `device`'s context current on this thread.
Result<const Driver*> on_device(int device) {
  auto d = driver();
  if (!d) return d.error();
  if (auto s = check_device(device); !s) return s.error();
  if (auto s = use_device(**d, device); !s) return s.error();
  return *d;
}

// Best effort: a region without a DMA-BUF still works through peermem or staging.
void try_export_dmabuf(MemoryRegion& region) {
  const auto& devices = availability().devices;
  const auto device = static_cast<std::size_t>(region.device());
  if (device < devices.size() && devices[device].dmabuf) (void)export_dmabuf(region);
}

}  // namespace

Result<MemoryRegion> allocate(int device, std::uint64_t bytes) {
  if (bytes == 0) return make_error(ErrorCode::InvalidArgument, "cannot allocate an empty memory region");
  auto d = on_device(device);
  if (!d) return d.error();
  const Driver& drv = **d;
  CUdeviceptr p = 0;
  if (const CUresult rc = drv.mem_alloc(&p, bytes); rc != CUDA_SUCCESS) {
    Error e = error(drv, "cuMemAlloc", rc);
    e.message = "allocating " + std::to_string(bytes) + " bytes on CUDA device " + std::to_string(device) +
                ": " + e.message;
    return e;
  }
  // Zeroed like fresh host pages, so a new region never shows what an earlier tenant left on the device.
  if (const CUresult rc = drv.memset_d8(p, 0, bytes); rc != CUDA_SUCCESS) {
    drv.mem_free(p);
    return error(drv, "cuMemsetD8", rc);
  }
  // The memset is asynchronous; a NIC or another stream must not see the region before it is done.
  if (const CUresult rc = drv.stream_synchronize(nullptr); rc != CUDA_SUCCESS) {
    drv.mem_free(p);
    return error(drv, "cuStreamSynchronize", rc);
  }
  MemoryRegion region =
      MemoryRegion::borrow(MemoryKind::Cuda, reinterpret_cast<void*>(p), bytes, device, [&drv, p, device] {
        (void)use_device(drv, device);
        drv.mem_free(p);
      });
  try_export_dmabuf(region);
  return region;
}

Result<MemoryRegion> import_ipc(std::span<const std::byte> handle, std::uint64_t bytes, int device) {
  if (handle.size() != kIpcHandleBytes) {
    return make_error(ErrorCode::InvalidArgument, "a CUDA IPC handle is " + std::to_string(kIpcHandleBytes) +
                                                      " bytes, got " + std::to_string(handle.size()));
  }
  if (bytes == 0) return make_error(ErrorCode::InvalidArgument, "the imported CUDA range is empty");
  auto d = on_device(device);
  if (!d) return d.error();
  const Driver& drv = **d;
  CUipcMemHandle h{};
  std::memcpy(h.reserved, handle.data(), kIpcHandleBytes);
  CUdeviceptr p = 0;
  if (const CUresult rc = drv.ipc_open_mem_handle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      rc != CUDA_SUCCESS) {
    Error e = error(drv, "cuIpcOpenMemHandle", rc);
    if (e.code == ErrorCode::Provider) e.code = ErrorCode::InvalidArgument;  // a stale or foreign handle
    return e;
  }
  MemoryRegion region =
      MemoryRegion::borrow(MemoryKind::Cuda, reinterpret_cast<void*>(p), bytes, device, [&drv, p, device] {
        (void)use_device(drv, device);
        drv.ipc_close_mem_handle(p);
      });
  try_export_dmabuf(region);
  return region;
}

Result<std::vector<std::byte>> export_ipc(const MemoryRegion& region) {
  if (auto s = check_device_range(region, 0, 0); !s) return s.error();
  auto d = on_device(region.device());
  if (!d) return d.error();
  CUipcMemHandle h{};
  if (const CUresult rc = (*d)->ipc_get_mem_handle(&h, device_pointer(region, 0)); rc != CUDA_SUCCESS) {
    return error(**d, "cuIpcGetMemHandle", rc);
  }
  std::vector<std::byte> out(kIpcHandleBytes);
  std::memcpy(out.data(), h.reserved, kIpcHandleBytes);
  return out;
}

Result<MemoryRegion> allocate_pinned(std::uint64_t bytes) {
  if (bytes == 0) return make_error(ErrorCode::InvalidArgument, "cannot allocate an empty memory region");
  auto d = driver();
  if (!d) return d.error();
  const Driver& drv = **d;
  if (auto s = check_device(0); !s) return s.error();
  // Portable pinned memory belongs to no context in particular, but the call needs one current.
  if (auto s = use_device(drv, 0); !s) return s.error();
  void* p = nullptr;
  if (const CUresult rc = drv.mem_host_alloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE); rc != CUDA_SUCCESS) {
    return error(drv, "cuMemHostAlloc", rc);
  }
  std::memset(p, 0, bytes);
  return MemoryRegion::borrow(MemoryKind::Host, p, bytes, -1, [&drv, p] {
    (void)use_device(drv, 0);
    drv.mem_free_host(p);
  });
}

Status export_dmabuf(MemoryRegion& region) {
  if (auto s = check_device_range(region, 0, 0); !s) return s;
  auto d = on_device(region.device());
  if (!d) return d.error();
  if ((*d)->mem_get_handle_for_address_range == nullptr) {
    return make_error(ErrorCode::Unsupported,
                      "this CUDA driver has no cuMemGetHandleForAddressRange (DMA-BUF)");
  }
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t start = device_pointer(region, 0);
  const std::uint64_t aligned = start / page * page;
  const std::uint64_t end = (start + region.size() + page - 1) / page * page;
  int fd = -1;
  const CUresult rc = (*d)->mem_get_handle_for_address_range(&fd, aligned, end - aligned,
                                                             CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (rc != CUDA_SUCCESS) {
    Error e = error(**d, "cuMemGetHandleForAddressRange", rc);
    e.code = ErrorCode::Unsupported;  // no DMA-BUF on this driver, kernel or device: callers fall back
    return e;
  }
  region.attach_dmabuf(fd, start - aligned);
  return {};
}

Status copy_to_host(const MemoryRegion& device, std::uint64_t offset, std::span<std::byte> host) {
  if (auto s = check_device_range(device, offset, host.size()); !s) return s;
  if (host.empty()) return {};
  auto d = on_device(device.device());
  if (!d) return d.error();
  if (const CUresult rc = (*d)->memcpy_dtoh(host.data(), device_pointer(device, offset), host.size());
      rc != CUDA_SUCCESS) {
    return error(**d, "cuMemcpyDtoH", rc);
  }
  return {};
}

Status copy_to_device(const MemoryRegion& device, std::uint64_t offset, std::span<const std::byte> host) {
  if (auto s = check_device_range(device, offset, host.size()); !s) return s;
  if (host.empty()) return {};
  auto d = on_device(device.device());
  if (!d) return d.error();
  if (const CUresult rc = (*d)->memcpy_htod(device_pointer(device, offset), host.data(), host.size());
      rc != CUDA_SUCCESS) {
    return error(**d, "cuMemcpyHtoD", rc);
  }
  // From pageable memory the call may return before the DMA ends; callers expect the bytes to be there.
  if (const CUresult rc = (*d)->stream_synchronize(nullptr); rc != CUDA_SUCCESS) {
    return error(**d, "cuStreamSynchronize", rc);
  }
  return {};
}

namespace {

// One stream for every copy of a staged transfer (copies run one after the other, overlapping the
// network rather than each other) and one event per slot recorded after that slot's copy.
class StreamCopier final : public DeviceCopier {
 public:
  StreamCopier(const Driver& d, const MemoryRegion& region) : d_(d), region_(region) {}
  ~StreamCopier() override {
    if (use_device(d_, region_.device())) {
      for (CUevent e : events_) d_.event_destroy(e);
      if (stream_ != nullptr) d_.stream_destroy(stream_);
    }
  }

  Status open(int slots) {
    if (const CUresult rc = d_.stream_create(&stream_, CU_STREAM_NON_BLOCKING); rc != CUDA_SUCCESS) {
      return error(d_, "cuStreamCreate", rc);
    }
    for (int s = 0; s < slots; ++s) {
      CUevent e = nullptr;
      if (const CUresult rc = d_.event_create(&e, CU_EVENT_DISABLE_TIMING); rc != CUDA_SUCCESS) {
        return error(d_, "cuEventCreate", rc);
      }
      events_.push_back(e);
      started_.push_back(false);
    }
    return {};
  }

  Status start_to_host(int slot, std::uint64_t device_offset, std::span<std::byte> host) override {
    if (auto s = begin(slot, device_offset, host.size()); !s) return s;
    if (const CUresult rc =
            d_.memcpy_dtoh_async(host.data(), device_pointer(region_, device_offset), host.size(), stream_);
        rc != CUDA_SUCCESS) {
      return error(d_, "cuMemcpyDtoHAsync", rc);
    }
    return record(slot);
  }

  Status start_to_device(int slot, std::uint64_t device_offset, std::span<const std::byte> host) override {
    if (auto s = begin(slot, device_offset, host.size()); !s) return s;
    if (const CUresult rc =
            d_.memcpy_htod_async(device_pointer(region_, device_offset), host.data(), host.size(), stream_);
        rc != CUDA_SUCCESS) {
      return error(d_, "cuMemcpyHtoDAsync", rc);
    }
    return record(slot);
  }

  Status wait(int slot) override {
    if (slot < 0 || static_cast<std::size_t>(slot) >= events_.size()) {
      return make_error(ErrorCode::InvalidArgument, "no staging slot " + std::to_string(slot));
    }
    if (!started_[slot]) return {};
    started_[slot] = false;
    if (auto s = use_device(d_, region_.device()); !s) return s;
    if (const CUresult rc = d_.event_synchronize(events_[slot]); rc != CUDA_SUCCESS) {
      return error(d_, "cuEventSynchronize", rc);
    }
    return {};
  }

 private:
  Status begin(int slot, std::uint64_t offset, std::uint64_t length) {
    if (slot < 0 || static_cast<std::size_t>(slot) >= events_.size()) {
      return make_error(ErrorCode::InvalidArgument, "no staging slot " + std::to_string(slot));
    }
    if (auto s = check_device_range(region_, offset, length); !s) return s;
    return use_device(d_, region_.device());
  }

  Status record(int slot) {
    if (const CUresult rc = d_.event_record(events_[slot], stream_); rc != CUDA_SUCCESS) {
      return error(d_, "cuEventRecord", rc);
    }
    started_[slot] = true;
    return {};
  }

  const Driver& d_;
  const MemoryRegion& region_;
  CUstream stream_ = nullptr;
  std::vector<CUevent> events_;
  std::vector<bool> started_;
};

}  // namespace

Result<std::unique_ptr<DeviceCopier>> make_copier(const MemoryRegion& device_region, int slots) {
  if (auto s = check_device_range(device_region, 0, 0); !s) return s.error();
  if (slots < 1) return make_error(ErrorCode::InvalidArgument, "a copier needs at least one slot");
  auto d = on_device(device_region.device());
  if (!d) return d.error();
  auto copier = std::make_unique<StreamCopier>(**d, device_region);
  if (auto s = copier->open(slots); !s) return s.error();
  return std::unique_ptr<DeviceCopier>(std::move(copier));
}

Result<CopyBandwidth> measure_copy_bandwidth(int device, std::uint64_t bytes, int rounds) {
  auto dev = allocate(device, bytes);
  if (!dev) return dev.error();
  auto dev2 = allocate(device, bytes);
  if (!dev2) return dev2.error();
  auto host = allocate_pinned(bytes);
  if (!host) return host.error();
  auto d = on_device(device);
  if (!d) return d.error();
  const Driver& drv = **d;
  using Clock = std::chrono::steady_clock;
  auto best = [&](auto&& copy, const char* call) -> Result<double> {
    double rate = 0;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = Clock::now();
      if (const CUresult rc = copy(); rc != CUDA_SUCCESS) return error(drv, call, rc);
      if (const CUresult rc = drv.stream_synchronize(nullptr); rc != CUDA_SUCCESS) {
        return error(drv, "cuStreamSynchronize", rc);
      }
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      if (secs > 0) rate = std::max(rate, static_cast<double>(bytes) / secs);
    }
    return rate;
  };
  const CUdeviceptr a = device_pointer(*dev, 0);
  const CUdeviceptr b = device_pointer(*dev2, 0);
  void* h = host->data();
  auto h2d = best([&] { return drv.memcpy_htod(a, h, bytes); }, "cuMemcpyHtoD");
  if (!h2d) return h2d.error();
  auto d2h = best([&] { return drv.memcpy_dtoh(h, a, bytes); }, "cuMemcpyDtoH");
  if (!d2h) return d2h.error();
  auto d2d = best([&] { return drv.memcpy_dtod(b, a, bytes); }, "cuMemcpyDtoD");
  if (!d2d) return d2d.error();
  return CopyBandwidth{*h2d, *d2h, *d2d};
}

}  // namespace conduit::cuda
