// The target end of the staged path: a CUDA region that a transport cannot register (gpuDirect: staged)
// is granted through a pinned host staging buffer of the region's size. Peers write into (or read from)
// that buffer with plain one-sided RMA, and say when a range has landed (POST /v1/regions/{name}/staging
// {direction: toDevice}) or is wanted (toHost), so this agent copies it between buffer and device. One
// buffer per region, shared by all its staged grants and freed with the last of them. docs/gpu.md.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "agent_client.h"
#include "conduit/memory_region.h"
#include "conduit/result.h"
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

// The writer's side: tells the target agent, piece by piece, that bytes have landed in its staging buffer.
// One notice is in flight at a time, so the target's copy of piece k to the device overlaps piece k+1 on
// the wire; a piece counts as landed (committed) only once its notice came back.
class LandingNotices {
 public:
  // `region_offset`: where range offset 0 lies in the target region.
  LandingNotices(const AgentClient& peers, std::string url, std::string region, std::uint64_t region_offset)
      : peers_(peers), url_(std::move(url)), region_(std::move(region)), region_offset_(region_offset) {}
  ~LandingNotices();  // waits for the notice in flight
  LandingNotices(const LandingNotices&) = delete;
  LandingNotices& operator=(const LandingNotices&) = delete;

  // [offset, +length) of the range has landed: waits for the previous notice, then sends this one in the
  // background. The previous notice's error, if it failed.
  Status push(std::uint64_t offset, std::uint64_t length);
  Status finish();                                                // waits for the notice in flight
  std::uint64_t confirmed_end() const { return confirmed_end_; }  // range offsets below it are on the device

 private:
  const AgentClient& peers_;
  std::string url_;
  std::string region_;
  std::uint64_t region_offset_;
  std::future<Status> pending_;
  std::uint64_t pending_end_ = 0;
  std::uint64_t confirmed_end_ = 0;
};

}  // namespace conduit::agent
