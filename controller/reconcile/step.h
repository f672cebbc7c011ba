// The TransferJob lifecycle as one decision: from what the job says (spec, status, the run annotation) and
// what the source agent says about the current transfer, pick the next step. Pure, so every transition is a
// table row in a unit test; Reconciler carries the steps out.
//
//   (new) --> Pending --StartAttempt--> Running --Complete--> Succeeded --(ttl)--> deleted
//                              |                        |  \--Retry (backoff 1 s, 2 s, ... 60 s)--^
//                              |                        \--Fail (permanent error, BackoffLimitExceeded,
//                              |                                 DeadlineExceeded) --> Failed --(ttl)-->
//                              \--Suspend <--> Resume (Suspended)
//   any phase + deletionTimestamp --Finalize--> finalizer removed (a job gets the finalizer with the first
//   run record that holds something: the same write, so deletion never outruns cleanup)
//   StartAttempt whose pre-flight finds a node not answering: Pending, no attempt spent, until it answers (or
//   Failed PeerUnreachable at the deadline); one finding a transport a node cannot serve: Failed at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "agent_api.h"
#include "clock.h"
#include "conduit/api/reasons.h"
#include "run_state.h"
#include "transfer_job.h"

namespace conduit::controller {

// What a user reads in the Failed/Running conditions: CamelCase, each one a thing to fix or to wait for.
// Where the cause is one an agent names too, the word is the agent's (conduit/api/reasons.h); a failed
// transfer's own reason is copied from the agent as it came.
namespace reason {
using api::reason::kAccessLost;
using api::reason::kDeadlineExceeded;
using api::reason::kNoSpaceLeft;
using api::reason::kPeerUnreachable;
using api::reason::kRemoteAccessDenied;
using api::reason::kSourceFileChanged;
inline constexpr const char* kInvalidSpec = "InvalidSpec";
inline constexpr const char* kUnsupported = "Unsupported";
inline constexpr const char* kNodeNotFound = "NodeNotFound";
inline constexpr const char* kRegionNotFound = "RegionNotFound";
inline constexpr const char* kRegionAlreadyExists = "RegionAlreadyExists";
// A region of another namespace that does not share it with the job's (docs/security.md, "Tenancy").
inline constexpr const char* kRegionNotShared = "RegionNotShared";
inline constexpr const char* kSourceFileNotFound = "SourceFileNotFound";
inline constexpr const char* kSizeMismatch = "SizeMismatch";
// spec.tensors against the regions' manifests (api/tensor_subset.h): a tensor missing or not the same.
inline constexpr const char* kTensorMismatch = "TensorMismatch";
inline constexpr const char* kInsufficientMemory = "InsufficientMemory";
inline constexpr const char* kTransportUnavailable = "TransportUnavailable";
inline constexpr const char* kTransferLost = "TransferLost";
inline constexpr const char* kSaveFailed = "SaveFailed";
inline constexpr const char* kAgentError = "AgentError";
inline constexpr const char* kBackoffLimitExceeded = "BackoffLimitExceeded";
// podSelector (pods.h): no pod that can take part matches yet (the job waits); the source's matches several;
// a pod's region on its node is not one that pod shared; a region a pod shared, named by node and region;
// the controller may not list pods.
inline constexpr const char* kNoReadyPods = "NoReadyPods";
inline constexpr const char* kAmbiguousPodSelector = "AmbiguousPodSelector";
inline constexpr const char* kRegionNotOwnedByPod = "RegionNotOwnedByPod";
inline constexpr const char* kRegionOwnedByPod = "RegionOwnedByPod";
inline constexpr const char* kPodsUnknown = "PodsUnknown";
// Reshard (docs/reshard.md): the planner refused the pods' manifests (a dtype or global shape that differs,
// a target range no source holds; the message names the tensor and range); the target regions are not at one
// version; a target region moved on while the job ran (another writer), so it cannot reach the job's version.
inline constexpr const char* kReshardRefused = "ReshardRefused";
inline constexpr const char* kTargetVersionsDiffer = "TargetVersionsDiffer";
inline constexpr const char* kVersionConflict = "VersionConflict";
}  // namespace reason

// A job held Pending names why (PeerUnreachable, NoReadyPods) and what it waits for in its Running condition.
struct Waiting {
  std::string reason;
  std::string message;
};

// The job as far as the decision needs it.
struct JobView {
  bool deleting = false;  // metadata.deletionTimestamp is set
  bool has_finalizer = false;
  std::string phase;  // empty for a job never reconciled
  std::optional<TransferJobSpec> spec;
  std::string spec_reason;  // InvalidSpec or Unsupported when spec is empty
  std::string spec_error;
  std::optional<TimePoint> start_time;
  std::optional<TimePoint> completion_time;
  std::uint32_t retries = 0;
  // Held Pending (for nodes that do not answer, for Ready pods): why and what it waits for.
  std::optional<Waiting> waiting;
};

// What the source agent said about run.transfer this pass.
struct Observation {
  enum class Kind : std::uint8_t { None, Answered, Unreachable, Lost };
  Kind kind = Kind::None;
  api::TransferStatus transfer;                  // Answered
  std::string error;                             // Unreachable, Lost
  std::chrono::milliseconds unreachable_for{0};  // how long the agent has not answered
};

enum class StepKind : std::uint8_t {
  Idle,           // nothing to do (settled, or waiting for the TTL: see wait)
  Finalize,       // being deleted: cancel, revoke, drop the finalizer
  DeleteExpired,  // ttlSecondsAfterFinished has passed
  Fail,           // cancel, revoke, phase Failed with reason
  Suspend,        // cancel, revoke, phase Suspended
  Resume,         // suspend lifted: back to Pending, deadline clock restarts
  Fence,          // grants recorded but no transfer id (a controller died mid-start): revoke them so a
                  // transfer that may have started cannot write, then start afresh
  WaitBackoff,    // a retry is due at run.not_before
  StartAttempt,   // regions, grants, POST /v1/transfers
  Track,          // the transfer runs: copy its progress into status
  WaitForAgent,   // the source agent does not answer; within the grace period
  Complete,       // the transfer succeeded: revoke, save files, phase Succeeded
  Retry,          // the attempt failed: clean it up, count it, back off
};

struct Step {
  StepKind kind = StepKind::Idle;
  std::string reason;                             // Fail, Retry
  std::string message;                            // Fail, Retry
  std::optional<std::chrono::milliseconds> wait;  // look again after this
};

struct DecideOptions {
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds unreachable_grace{std::chrono::seconds(10)};
};

Step decide(const JobView& job, const RunState& run, const Observation& seen, TimePoint now,
            const DecideOptions& options = {});

// After an attempt failed with `reason`: Fail at once for errors retrying cannot fix, Fail with
// BackoffLimitExceeded once spec.backoffLimit retries are spent, else Retry.
Step retry_or_fail(const TransferJobSpec& spec, std::uint32_t retries, const std::string& reason,
                   const std::string& message);
bool is_permanent(const std::string& reason);

// When to look at a running transfer again: at poll_interval, or sooner when it should finish before then
// (from its rate and what is left; not below 50 ms), so Succeeded reaches status soon after the agent is
// done.
std::chrono::milliseconds next_look(const api::TransferStatus& t, std::chrono::milliseconds poll_interval);
// Whether a running transfer should end within `window` (every byte moved, or its rate says so): the next
// look then waits at the agent for the end instead of arriving a poll late.
bool ends_within(const api::TransferStatus& t, std::chrono::milliseconds window);

// 1 s, 2 s, 4 s, ... capped at 60 s, for the retry that follows `retries` earlier ones.
std::chrono::milliseconds backoff_delay(std::uint32_t retries);

std::string_view to_string(StepKind kind);

}  // namespace conduit::controller
