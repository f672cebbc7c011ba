// The target end of one range as the writer (or reader) sees it: plain memory, where a finished batch
// means its bytes have landed, or a staging buffer in front of CUDA memory (its grant says "staged"),
// whose agent copies each landed segment to its device, or stages a segment from it before it is read.
// docs/gpu.md. One per range a run sends; it knows nothing of batches or retries.
#pragma once

#include <cstdint>
#include <future>
#include <optional>
#include <string>

#include "conduit/api/agent_client.h"
#include "conduit/common/result.h"
#include "conduit/transport.h"

namespace conduit::agent {

// The writer's side of a staged target: tells the target agent, segment by segment, that bytes have
// landed in its staging buffer. One notice is in flight at a time, so the target's copy of segment k to
// the device overlaps segment k+1 on the wire; a segment counts as landed only once its notice came back.
class LandingNotices {
 public:
  // `region_offset`: where range offset 0 lies in the target region.
  LandingNotices(const api::ClientOptions& peers, std::string url, std::string region,
                 std::uint64_t region_offset)
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
  const api::ClientOptions& peers_;
  std::string url_;
  std::string region_;
  std::uint64_t region_offset_;
  std::future<Status> pending_;
  std::uint64_t pending_end_ = 0;
  std::uint64_t confirmed_end_ = 0;
};

class TargetPath {
 public:
  struct Target {
    std::string url;                  // the target agent
    std::string region;               // the target region
    std::uint64_t region_offset = 0;  // where range offset 0 lies in that region
    bool staged = false;              // the grant is a staging buffer in front of CUDA memory
  };

  // For the range from `begin` on.
  TargetPath(const api::ClientOptions& peers, Target target, OpKind op, std::uint64_t begin);

  // Before segment [offset, +length) goes on the wire: a staged target stages it for a read.
  Status before(std::uint64_t offset, std::uint64_t length);
  // Its batch finished: the range offset below which every byte is now at the target, if that moved.
  Result<std::optional<std::uint64_t>> after(std::uint64_t offset, std::uint64_t length);
  // After the range's last segment, ending at `end`: waits for the last notice. As after().
  Result<std::optional<std::uint64_t>> finish(std::uint64_t end);

 private:
  bool notices() const { return target_.staged && op_ == OpKind::Write; }

  const api::ClientOptions& peers_;
  Target target_;
  OpKind op_;
  std::uint64_t begin_;
  LandingNotices notices_;
};

}  // namespace conduit::agent
