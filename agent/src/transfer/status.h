// What a transfer says of itself: its state, each target's, the bytes and the stages' times, as GET
// /v1/transfers shows them.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/api/reasons.h"
#include "conduit/api/transfer.h"

namespace conduit::agent {

enum class TransferState : std::uint8_t { Queued, Running, Succeeded, Failed, Cancelled };
// Succeeded, Failed or Cancelled: the transfer will not change again.
inline bool ended(TransferState s) { return s != TransferState::Queued && s != TransferState::Running; }
std::string_view to_string(TransferState state);

// Reason codes a caller can act on (the controller copies them into TransferJob conditions).
namespace reason = api::reason;  // conduit/api/reasons.h

struct TargetStatus {
  TransferState state = TransferState::Queued;
  std::uint64_t bytes_done = 0;
  std::uint64_t committed_bytes = 0;  // [0, this) has landed at the target: where a later transfer may resume
  std::string last_error;
  // The target's range is a host staging buffer in front of CUDA memory (its key says so): each piece is
  // copied to the device by the target agent before it counts as landed.
  bool staged = false;
};

// Seconds each stage of the pipeline was busy, over all targets: reading the source (a file's reads, and
// CRC32C as bytes pass), the wire (batches in flight), landing (the targets' checks and saves, as the
// source waited for their reports) and the final commit (fsync and rename). Stages overlap, so they add up
// to more than the wall time; the largest is what the transfer ran at.
struct StageSeconds {
  double read = 0;
  double wire = 0;
  double land = 0;
  double commit = 0;
};

struct TransferStatus {
  std::string id;
  TransferState state = TransferState::Queued;
  std::uint64_t bytes_total = 0;  // length x targets
  std::uint64_t bytes_done = 0;
  double throughput_bytes_per_second = 0;
  std::uint32_t retries = 0;
  std::uint32_t slices_resent = 0;  // after a checksum mismatch
  bool verified = false;
  // How the source region is reached: "none" (host memory), "dmabuf" / "peermem" (CUDA memory registered
  // with the NIC), "staged" (CUDA memory through pinned host bounce buffers).
  std::string gpu_path = "none";
  // The NICs the source's registrations use (the rails nearest its memory, conduit/rail_choice.h); empty
  // where the transport's rails name no NIC (tcp, shm).
  std::vector<std::string> source_nics;
  std::string reason;   // set when Failed or Cancelled
  std::string message;  // human text for reason
  std::vector<TargetStatus> targets;
  StageSeconds stages;
  // Which NICs carried the bytes, judged from their counters once the transfer ended (docs/path.md);
  // absent until then, and for a scatter-gather transfer.
  std::optional<api::TransferPath> path;
  std::string requested_by;   // ResolvedRequest's; not shown
  std::string job_namespace;  // ResolvedRequest's; not shown
  std::chrono::system_clock::time_point created_at;
  std::optional<std::chrono::system_clock::time_point> started_at;
  std::optional<std::chrono::system_clock::time_point> finished_at;

  // The body GET /v1/transfers/{id} answers: the one api::TransferStatus the controller and the CLI read.
  api::TransferStatus to_api() const;
};

}  // namespace conduit::agent
