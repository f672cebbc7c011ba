// A Reshard attempt (docs/reshard.md, "TransferJob strategy: Reshard") as the controller runs it: the plan's
// batches, one scatter transfer each from a source pod's agent into a target pod's long-lived write grant,
// all at once; a failed batch retried alone; once every batch of every target succeeded, every target
// region committed to one version K. The record (kept in the run annotation, run_state.h) and the decision
// over it, which is pure: the reconciler looks at the batches' transfers and carries the step out
// (reshard.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "clock.h"
#include "conduit/api/transfer.h"

namespace conduit::controller {

struct TransferJobSpec;

// One batch: a (source pod, target pod) pair's ops, or part of them (a pair over kMaxScatterOps ops is
// several batches).
struct ReshardBatch {
  enum class State : std::uint8_t { Pending, Running, Succeeded, Failed };
  std::uint32_t source = 0;  // index into spec.sources
  std::uint32_t target = 0;  // into spec.targets
  std::uint64_t bytes = 0;
  std::uint32_t ops = 0;
  State state = State::Pending;
  std::string transfer{};      // the agent transfer on the source's node, now or last; "" before the first
  std::uint32_t attempts = 0;  // transfers started for it
  std::uint64_t done = 0;      // bytes its transfer moved, at the last look
  std::string reason{};        // why its last transfer failed
  std::string message{};
  std::optional<TimePoint> not_before{};  // a retry waits for its backoff
  bool operator==(const ReshardBatch&) const = default;
};

std::string_view to_string(ReshardBatch::State state);

// The plan's figures as status.reshard shows them; `busiest` is the link (a source's egress or a target's
// ingress) carrying the most bytes.
struct ReshardFigures {
  std::uint64_t bytes = 0;
  bool busiest_target = false;
  std::uint32_t busiest = 0;  // index into spec.sources or spec.targets
  std::uint64_t busiest_bytes = 0;
  std::optional<double> lower_bound_seconds{};  // the busiest link's bytes / its rate, where rates are known
  bool operator==(const ReshardFigures&) const = default;
};

struct ReshardRun {
  std::string fingerprint;         // the plan's: a restart re-plans and must come to the same one
  std::uint64_t from_version = 0;  // every target region's version when the attempt started; commits reach +1
  ReshardFigures figures;
  std::vector<ReshardBatch> batches;
  std::vector<bool> committed;  // per target: its region reached from_version + 1

  std::uint64_t version() const { return from_version + 1; }
  bool all_landed() const;
  bool all_committed() const;
  nlohmann::json to_json() const;
  static std::optional<ReshardRun> from_json(const nlohmann::json& j);
  bool operator==(const ReshardRun&) const = default;
};

// What the reconciler saw of one batch's transfer this pass.
struct BatchSeen {
  enum class Kind : std::uint8_t { None, Answered, Unreachable, Lost };
  Kind kind = Kind::None;  // None: not looked at (not running)
  api::TransferStatus transfer;
  std::string error;                             // Unreachable, Lost
  std::chrono::milliseconds unreachable_for{0};  // how long its source agent has not answered
};

struct ReshardStep {
  enum class Kind : std::uint8_t {
    Wait,      // batches running or backing off: look again after `wait`
    Start,     // start `start`'s batches (first transfers or retries)
    Commit,    // every batch landed: commit the targets not yet committed to version K
    Complete,  // every target is at K
    Fail,      // a batch failed for good: `reason`, `message`
  };
  Kind kind = Kind::Wait;
  std::vector<std::size_t> start;
  std::string reason;
  std::string message;
  std::optional<std::chrono::milliseconds> wait;
};

struct ReshardOptions {
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds unreachable_grace{std::chrono::seconds(10)};
};

// Folds what was seen of each batch (`seen`, by batch index; shorter means not looked at) into `run`, then
// picks the next step. A batch that failed is retried alone after backoff_delay, up to spec.backoffLimit
// retries of that batch; a reason retrying cannot fix (is_permanent) or a batch past its limit fails the
// job. `names(batch)` says which pair a batch is in messages ("trainer-0 -> infer-1").
ReshardStep step_reshard(ReshardRun& run, const std::vector<BatchSeen>& seen, const TransferJobSpec& spec,
                         TimePoint now, const std::function<std::string(const ReshardBatch&)>& names,
                         const ReshardOptions& options = {});

}  // namespace conduit::controller
