// The target end of the staged path: a CUDA region that a transport cannot register (gpuDirect: staged)
// is granted through a pinned host staging buffer of the region's size. Peers write into (or read from)
// that buffer with plain one-sided RMA, and say when a range has landed (POST /v1/regions/{name}/staging
// {direction: toDevice}) or is wanted (toHost), so this agent copies it between buffer and device. One
// buffer per region, shared by all its staged grants and freed with the last of them. The writer's side
// is target_path.h. docs/gpu.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "conduit/common/result.h"
#include "conduit/memory_region.h"
#include "regions.h"

namespace conduit::agent {

class StagingBuffer {
 public:
  StagingBuffer(RegionPtr region, MemoryRegion host) : region_(std::move(region)), host_(std::move(host)) {}
  const MemoryRegion& memory() const { return host_; }  // offsets are the region's own
  const Region& region() const { return *region_; }

  // [offset, +length) of the region: staging buffer -> device, or device -> staging buffer.
  Status to_device(std::uint64_t offset, std::uint64_t length) const;
  Status to_host(std::uint64_t offset, std::uint64_t length) const;

 private:
  RegionPtr region_;
  MemoryRegion host_;
};

class StagingTable {
 public:
  // The region's buffer, made (pinned, region-sized) when it has none.
  Result<std::shared_ptr<StagingBuffer>> acquire(const RegionPtr& region);
  // The live buffer of region `name`, or null when no staged grant holds one.
  std::shared_ptr<StagingBuffer> find(const std::string& name) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::weak_ptr<StagingBuffer>> buffers_;
};

}  // namespace conduit::agent
