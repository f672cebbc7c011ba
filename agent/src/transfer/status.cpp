// A transfer's record as the body every transfer route answers (agent/openapi.yaml, TransferStatus).
#include "transfer/status.h"

#include "conduit/common/time.h"

namespace conduit::agent {

namespace {

std::optional<std::string> optional_time(const std::optional<std::chrono::system_clock::time_point>& t) {
  if (!t) return std::nullopt;
  return format_rfc3339(*t, TimePrecision::Millis);
}

}  // namespace

std::string_view to_string(TransferState state) {
  switch (state) {
    case TransferState::Queued:
      return "Queued";
    case TransferState::Running:
      return "Running";
    case TransferState::Succeeded:
      return "Succeeded";
    case TransferState::Failed:
      return "Failed";
    case TransferState::Cancelled:
      return "Cancelled";
  }
  return "Unknown";
}

api::TransferStatus TransferStatus::to_api() const {
  api::TransferStatus out;
  out.id = id;
  out.state = std::string(to_string(state));
  out.bytes_total = bytes_total;
  out.bytes_done = bytes_done;
  out.throughput = throughput_bytes_per_second;
  out.retries = retries;
  out.slices_resent = slices_resent;
  out.verified = verified;
  out.gpu_path = gpu_path;
  out.source_nics = source_nics;
  out.reason = reason;
  out.message = message;
  out.targets.reserve(targets.size());
  for (const TargetStatus& t : targets) {
    out.targets.push_back({.state = std::string(to_string(t.state)),
                           .bytes_done = t.bytes_done,
                           .last_error = t.last_error,
                           .committed_bytes = t.committed_bytes,
                           .staged = t.staged});
  }
  out.stages = {.read = stages.read, .wire = stages.wire, .land = stages.land, .commit = stages.commit};
  out.created_at = format_rfc3339(created_at, TimePrecision::Millis);
  out.started_at = optional_time(started_at);
  out.finished_at = optional_time(finished_at);
  out.path = path;
  return out;
}

}  // namespace conduit::agent
