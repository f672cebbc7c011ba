// What the controller must remember about a job's current attempt to act exactly once across restarts: the
// agent transfer it started, the grants it holds, the regions it created. The CRD's status schema has no
// fields for these (and the apiserver prunes unknown ones), so they live as JSON in the annotation
// `conduit.dev/run`, written through patch_job_metadata *before* the step they guard takes effect.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "clock.h"
#include "pods.h"
#include "reshard_run.h"

namespace conduit::controller {

inline constexpr const char* kRunAnnotation = "conduit.dev/run";
inline constexpr const char* kFinalizer = "conduit.dev/cleanup";

// Whether the job carries kFinalizer (deletion waits for the controller's cleanup).
bool has_finalizer(const nlohmann::json& job);

struct NodeRef {
  std::string node;
  std::string name;  // a grant id, a transfer id or a region name
  bool operator==(const NodeRef&) const = default;
};

struct RunState {
  std::uint32_t attempt = 0;  // attempts started (1-based once the first starts)
  // The source region of this run; temporary when the job's source is a file the controller loaded.
  std::optional<NodeRef> source;
  bool source_temporary = false;
  std::uint64_t length = 0;             // bytes per target
  std::vector<NodeRef> created;         // target regions this job created (recorded before creating them)
  std::vector<NodeRef> grants;          // live grants of the current attempt (recorded as soon as granted)
  std::optional<NodeRef> transfer;      // the agent transfer of the current attempt
  std::vector<std::string> transports;  // per target, the transport its grant uses
  // Per target: its file is saved by its agent as the bytes land (and committed when the transfer
  // succeeds), not by a save after the transfer.
  std::vector<bool> saved_as_landed;
  std::optional<TimePoint> not_before;  // backoff: no new attempt before this
  // Per target, the bytes earlier attempts left in place (their committedBytes): where the next attempt
  // resumes. Only used with verify: crc32c, which checks the whole range whatever the claim.
  std::vector<std::uint64_t> resume;
  // Per target: every byte landed in an earlier attempt (its agent said the target Succeeded), so later
  // attempts leave it out and a failed job keeps its region (a Fanout's living targets stay done).
  std::vector<bool> landed;
  // The targets (spec indices) of the current attempt's transfer, in its order; empty means all of them.
  std::vector<std::uint32_t> sent;
  // Grants of earlier attempts whose revoke failed (their node did not answer): revoked again by every
  // later release and before the next attempt, so a key does not outlive its transfer by the grant TTL.
  std::vector<NodeRef> unrevoked;
  // What the job's podSelectors picked at its first attempt (pods.h): every later attempt runs over them.
  std::vector<PodPick> pods;
  // Strategy Reshard: the current attempt's batches (their transfers instead of `transfer`) and commits; the
  // targets' long-lived write grants are `grants`, in spec.targets order.
  std::optional<ReshardRun> reshard;
  // spec.tensors: the version the target region commits to once the subset landed (its version then + 1),
  // recorded before the commit so that a commit whose answer was lost is not made twice.
  std::optional<std::uint64_t> subset_version;

  static RunState from_job(const nlohmann::json& job);  // empty when the annotation is absent or unreadable
  nlohmann::json to_json() const;
  std::string to_annotation() const { return to_json().dump(); }
  bool operator==(const RunState&) const = default;

  bool created_region(const std::string& node, const std::string& region) const;
  bool target_landed(std::size_t target) const { return target < landed.size() && landed[target]; }
};

}  // namespace conduit::controller
