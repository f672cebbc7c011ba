// TransferJob status as the CRD describes it, built up as JSON: its conditions, the printer
// column strings ("42%", "5.2 GB/s"), and the JSON merge patch that turns the stored status into the new one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "agent_api.h"
#include "clock.h"
#include "conduit/common/condition.h"
#include "step.h"
#include "transfer_job.h"

namespace conduit::controller {

namespace phase {
inline constexpr const char* kPending = "Pending";
inline constexpr const char* kRunning = "Running";
inline constexpr const char* kSucceeded = "Succeeded";
inline constexpr const char* kFailed = "Failed";
inline constexpr const char* kSuspended = "Suspended";
}  // namespace phase

bool is_terminal_phase(std::string_view phase);

// The job's conditions (Accepted, Running, Complete, Failed, Suspended) are True or False and carry the
// generation they were decided for; conduit::set_condition does the metav1.Condition bookkeeping.
inline void set_condition(nlohmann::json& status, const std::string& type, bool value,
                          const std::string& reason, const std::string& message, TimePoint now,
                          std::int64_t generation) {
  conduit::set_condition(status, {type, value ? "True" : "False", reason, message, generation}, now);
}
using conduit::find_condition;

// A job held Pending says what for in its Running condition (False, PeerUnreachable for nodes that do not
// answer, NoReadyPods for a podSelector that matches no Ready pod); nullopt for a job that waits for nothing.
std::optional<Waiting> waiting_of(const nlohmann::json& status);

// What status.targets[] says of a target before its state: {node, region, file?, pod?}.
nlohmann::json target_entry(const TargetSpec& target);

// What --once-job prints for a finished job: "Succeeded: 5368709120 bytes, 2.1 GB/s, <Complete message>" or
// "Failed: <reason>: <message>". Byte counts are read as 64-bit: jobs move more than 2 GiB.
std::string outcome_summary(const nlohmann::json& status);

// "42%", "99.5%": floored, so a job shows 100% only when every byte is in.
std::string format_progress(std::uint64_t done, std::uint64_t total);
// "5.2 GB/s" in decimal units; "" when nothing moves.
std::string format_throughput(double bytes_per_second);

// RFC 7386 merge patch taking `from` to `to` (objects recurse, removed keys become null, arrays and scalars
// are replaced whole). An empty object when they are equal.
nlohmann::json merge_diff(const nlohmann::json& from, const nlohmann::json& to);

// True when phase or conditions differ: a transition users and --once-job wait for, written at once; other
// differences (bytes, throughput) are progress and may wait for the status rate limit.
bool is_transition(const nlohmann::json& from, const nlohmann::json& to);

// status.stages {readSeconds, wireSeconds, landSeconds, commitSeconds} from the agent's transfer, and
// status.slowestStage ("wire 0.31 s"), the one busy longest; left as they were when the agent says nothing.
void set_stages(nlohmann::json& status, const api::TransferStatus& t);

// status.targets[i]'s GPU path fields from the agent's transfer: gpuPath (how the source's memory was
// reached for it: none, dmabuf, peermem or staged; absent when the agent does not say) and staged (this
// target's CUDA region was reached through a host staging buffer). Sets or leaves `entry`'s keys.
void set_gpu_path(nlohmann::json& entry, const api::TransferStatus& t, std::size_t target);
// status.path from the source agent's proof of path (docs/path.md), cut to what the CRD holds (64 NICs,
// messages of 4096 and 1024 characters): one refused field would leave the whole status unwritten.
nlohmann::json path_status(const api::TransferPath& path);

// One sentence naming the ends that ran staged ("CUDA memory went through host memory (staged), not
// GPU-direct: source node-a/weights, target node-b/w"); "" when none did.
std::string staged_summary(const api::TransferStatus& t, const TransferJobSpec& spec);

// Whether a stored status already says a staged path ran (so the event saying so is not repeated, across
// controller restarts too).
bool status_shows_staged(const nlohmann::json& status);

}  // namespace conduit::controller
