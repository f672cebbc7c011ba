// Resharding as a plan (docs/reshard.md): a model held by N source ranks, each region's manifest placing its
// slices in the whole tensors (api::Placement), is to be held by M target ranks sliced another way (TP rows
// to TP columns, FSDP dim-0 shards to TP, pipeline stages to TP, replicas to shards). The planner is pure: it
// intersects every target slice with the source slices of the same tensor and turns the pieces into byte runs
// per (source rank, target rank) pair, scatter batches as POST /v1/transfers takes them; it refuses a
// mismatch or a gap before a byte moves; and its plans are cached by the manifests' fingerprint, so the next
// step of a training run reuses the schedule.
//
// Replicas are trusted: where several sources hold the same bytes of a tensor (data-parallel replicas, a
// norm every TP rank keeps whole), the planner takes them from one of them and assumes the others hold the
// same data. An executor verifies each target against the source it was planned from, never the replicas
// against each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "conduit/api/manifest.h"
#include "conduit/api/transfer.h"
#include "conduit/common/result.h"

namespace conduit::api {

// One rank: what its region holds (the region is the manifest's data_bytes() long) and the rate of its one
// link (a source's egress, a target's ingress).
struct ReshardSide {
  Manifest manifest;
  double rate_bytes_per_second = 0;  // 0: unknown
};

// The ops between one source rank's region and one target rank's: offsets relative to the two regions,
// sorted as the target's tensors are; a piece of a tensor split by columns (on either side) is a strided op
// (one per index of the dimensions outside its rows), runs back to back on both sides merged. At most
// kMaxScatterOps ops, kMaxScatterRuns runs and kMaxScatterBytes bytes (a longer run or op is cut), so each
// batch is one POST /v1/transfers; a pair with more has several batches, in order.
struct ReshardBatch {
  std::size_t source = 0;
  std::size_t target = 0;
  std::vector<ScatterOp> ops{};
  std::uint64_t bytes = 0;
  std::uint64_t runs = 0;  // the ops' counts together
};

enum class ReshardLinkSide { Source, Target };

// A rank's link and the bytes the plan puts on it.
struct ReshardLink {
  ReshardLinkSide side = ReshardLinkSide::Source;
  std::size_t index = 0;
  std::uint64_t bytes = 0;
};

struct ReshardPlan {
  std::vector<ReshardBatch> batches;        // by source, then target
  std::vector<std::uint64_t> source_bytes;  // each source's egress
  // Each target's ingress: the bytes of its tensors.
  std::vector<std::uint64_t> target_bytes;
  // The link with the most bytes (the first source, then the first target, on a tie).
  ReshardLink busiest;
  // The plan cannot finish sooner: the largest bytes / rate over the links whose rate is known (each link
  // moving at its rate, all at once); nullopt when no rate is known.
  std::optional<double> lower_bound_seconds;
  std::string fingerprint;  // reshard_fingerprint() of the inputs

  std::size_t ops() const;
  std::uint64_t runs() const;
};

// Bounds on what one plan may cost: the work and memory of planning, and what a REST answer carries.
inline constexpr std::size_t kMaxReshardRanks = 1024;  // sources, and targets
struct ReshardLimits {
  // Ops in all batches (after cutting at kMaxScatterBytes and kMaxScatterRuns), and before merging the ops
  // the tensors' slices cut into: a tensor split by columns on either side is one strided op per column
  // piece (per index of the dimensions outside its rows).
  std::uint64_t max_ops = 1ULL << 25;
};

// The plan that fills every target's tensors from the sources'. Rules (each refusal InvalidArgument naming
// the tensor, before anything is planned):
//   - every tensor of every target is held by at least one source, and every source holding it holds the same
//     dtype and global shape (both sides said); source tensors no target holds are ignored;
//   - every byte of every target slice is held by a source: a piece no source covers is refused naming the
//     tensor and the piece as [a:b, c:d] in the tensor's global coordinates;
//   - a piece several sources hold goes to the one that keeps the busiest link least loaded: the pieces only
//     one source holds are counted first, then these, largest first, each to the source whose egress would
//     end least loaded (in seconds when every candidate's rate is known, else in bytes), ties to the lower
//     index;
//   - zero-length tensors match and move nothing; 0-d tensors are one element.
// ResourceExhausted past `limits` or kMaxReshardRanks; InvalidArgument for no sources or targets, or a rate
// that is negative or not finite.
Result<ReshardPlan> plan_reshard(const std::vector<ReshardSide>& sources,
                                 const std::vector<ReshardSide>& targets, const ReshardLimits& limits = {});
// The same with the inputs' fingerprint already made (ReshardPlanner made it to look the plan up first).
Result<ReshardPlan> plan_reshard(const std::vector<ReshardSide>& sources,
                                 const std::vector<ReshardSide>& targets, const ReshardLimits& limits,
                                 std::string fingerprint);

// The SHA-256 (hex) of one manifest's tensor table as canonical JSON: [[name, dtype, shape, offset, length,
// globalShape, start], ...] in the manifest's order, a tensor without a placement written as the whole one;
// metadata left out. A caller that keeps a manifest unchanged may keep its digest.
std::string manifest_digest(const Manifest& manifest);

// A rank as its plan's fingerprint sees it: its manifest's digest and its link's rate.
struct ReshardSideKey {
  std::string manifest_digest;
  double rate_bytes_per_second = 0;
};

// The plans' fingerprint: the SHA-256 (hex) of the canonical JSON {"v":1,"sources":[{"manifest":digest,
// "rate":r}...],"targets":[...]} of both sides' manifest digests and rates, in rank order. Equal
// fingerprints, equal plans. From the manifests it costs hashing every tensor table (~10 MB for 96 ranks of a
// 1,000-tensor model); from kept digests, microseconds.
std::string reshard_fingerprint(const std::vector<ReshardSideKey>& sources,
                                const std::vector<ReshardSideKey>& targets);
std::string reshard_fingerprint(const std::vector<ReshardSide>& sources,
                                const std::vector<ReshardSide>& targets);

// Plans cached by fingerprint, the least recently used dropped past `max_plans` plans or `max_cached_ops`
// ops in all (a plan larger than that is returned, not kept). Thread-safe; planning runs outside the lock, so
// two callers missing at once both plan and the first one kept is what both get.
class ReshardPlanner {
 public:
  explicit ReshardPlanner(std::size_t max_plans = 64, std::uint64_t max_cached_ops = 1ULL << 26,
                          ReshardLimits limits = {});

  struct Planned {
    std::shared_ptr<const ReshardPlan> plan;
    bool cached = false;  // true: the plan was made before, for the same fingerprint
  };
  Result<Planned> plan(const std::vector<ReshardSide>& sources, const std::vector<ReshardSide>& targets);
  // The plan cached for a fingerprint, or null: for a caller that kept the fingerprint (or the manifest
  // digests) of inputs it knows are unchanged, which skips hashing them.
  std::shared_ptr<const ReshardPlan> find(const std::string& fingerprint);
  std::size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const ReshardPlan>>;
  std::shared_ptr<const ReshardPlan> touch(const std::string& fingerprint);  // with mutex_ held

  const std::size_t max_plans_;
  const std::uint64_t max_cached_ops_;
  const ReshardLimits limits_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_fingerprint_;
  std::uint64_t cached_ops_ = 0;
};

}  // namespace conduit::api
