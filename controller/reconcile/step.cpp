#include "step.h"

#include <algorithm>

#include "job_status.h"

namespace conduit::controller {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

std::string_view to_string(StepKind kind) {
  switch (kind) {
    case StepKind::Idle:
      return "Idle";
    case StepKind::Finalize:
      return "Finalize";
    case StepKind::DeleteExpired:
      return "DeleteExpired";
    case StepKind::Fail:
      return "Fail";
    case StepKind::Suspend:
      return "Suspend";
    case StepKind::Resume:
      return "Resume";
    case StepKind::Fence:
      return "Fence";
    case StepKind::WaitBackoff:
      return "WaitBackoff";
    case StepKind::StartAttempt:
      return "StartAttempt";
    case StepKind::Track:
      return "Track";
    case StepKind::WaitForAgent:
      return "WaitForAgent";
    case StepKind::Complete:
      return "Complete";
    case StepKind::Retry:
      return "Retry";
  }
  return "Idle";
}

bool is_permanent(const std::string& r) {
  return r == reason::kInvalidSpec || r == reason::kUnsupported || r == reason::kNodeNotFound ||
         r == reason::kRegionNotFound || r == reason::kRegionAlreadyExists ||
         r == reason::kSourceFileNotFound || r == reason::kSizeMismatch ||
         r == reason::kTransportUnavailable || r == reason::kDeadlineExceeded || r == reason::kNoSpaceLeft ||
         r == reason::kSourceFileChanged || r == reason::kRemoteAccessDenied ||
         r == reason::kRegionNotShared || r == reason::kRegionNotOwnedByPod ||
         r == reason::kRegionOwnedByPod || r == reason::kTensorMismatch || r == reason::kReshardRefused ||
         r == reason::kTargetVersionsDiffer || r == reason::kVersionConflict;
}

milliseconds backoff_delay(std::uint32_t retries) {
  const std::uint32_t shift = std::min<std::uint32_t>(retries, 6);  // 2^6 s > 60 s
  return std::min<milliseconds>(milliseconds(1000LL << shift), 60s);
}

Step retry_or_fail(const TransferJobSpec& spec, std::uint32_t retries, const std::string& r,
                   const std::string& message) {
  if (is_permanent(r)) return {StepKind::Fail, r, message, std::nullopt};
  if (retries >= spec.backoff_limit) {
    return {StepKind::Fail, reason::kBackoffLimitExceeded,
            "gave up after " + std::to_string(retries + 1) + " attempt" + (retries == 0 ? "" : "s") +
                " (backoffLimit " + std::to_string(spec.backoff_limit) + "); last error: " + r + ": " +
                message,
            std::nullopt};
  }
  return {StepKind::Retry, r, message, backoff_delay(retries)};
}

namespace {

Step idle(std::optional<milliseconds> wait = std::nullopt) { return {StepKind::Idle, "", "", wait}; }

milliseconds until(TimePoint when, TimePoint now) {
  return std::max(0ms, std::chrono::ceil<milliseconds>(when - now));
}

}  // namespace

milliseconds next_look(const api::TransferStatus& t, milliseconds poll_interval) {
  if (t.state != "Running" || t.bytes_total == 0) return poll_interval;
  // Every byte moved: the agent verifies, which takes about as long as reading the region once.
  if (t.bytes_done >= t.bytes_total) return std::min(poll_interval, 100ms);
  // Just started, no rate yet.
  if (t.throughput <= 0) return std::min(poll_interval, 100ms);
  const double left_s = static_cast<double>(t.bytes_total - t.bytes_done) / t.throughput;
  const auto left = milliseconds(static_cast<std::int64_t>(std::min(left_s, 3600.0) * 1000.0));
  return std::clamp(left, std::min(poll_interval, 50ms), poll_interval);
}

bool ends_within(const api::TransferStatus& t, milliseconds window) {
  if (t.state != "Running" || t.bytes_total == 0) return false;
  if (t.bytes_done >= t.bytes_total) return true;
  if (t.throughput <= 0) return false;
  const double left_s = static_cast<double>(t.bytes_total - t.bytes_done) / t.throughput;
  return left_s * 1000.0 < static_cast<double>(window.count());
}

namespace {

// The transfer of the current attempt, as its agent reports it.
Step follow_transfer(const JobView& job, const TransferJobSpec& spec, const Observation& seen,
                     const DecideOptions& options) {
  switch (seen.kind) {
    case Observation::Kind::Answered: {
      const api::TransferStatus& t = seen.transfer;
      if (t.state == "Succeeded") return {StepKind::Complete, "", "", std::nullopt};
      if (t.state == "Failed" || t.state == "Cancelled") {
        const std::string r = t.reason.empty() ? reason::kAgentError : t.reason;
        return retry_or_fail(spec, job.retries, r, t.message.empty() ? "transfer " + t.state : t.message);
      }
      return {StepKind::Track, "", "", next_look(t, options.poll_interval)};
    }
    case Observation::Kind::Lost:
      return retry_or_fail(spec, job.retries, reason::kTransferLost, seen.error);
    case Observation::Kind::Unreachable:
      if (seen.unreachable_for >= options.unreachable_grace) {
        return retry_or_fail(spec, job.retries, reason::kPeerUnreachable, seen.error);
      }
      return {StepKind::WaitForAgent, "", "", options.poll_interval};
    case Observation::Kind::None:
      break;
  }
  // Not looked at this pass: look.
  return {StepKind::Track, "", "", options.poll_interval};
}

}  // namespace

Step decide(const JobView& job, const RunState& run, const Observation& seen, TimePoint now,
            const DecideOptions& options) {
  if (job.deleting) return job.has_finalizer ? Step{StepKind::Finalize, "", "", std::nullopt} : idle();

  if (is_terminal_phase(job.phase)) {
    if (!job.spec || !job.spec->ttl_seconds_after_finished) return idle();
    const TimePoint expires =
        job.completion_time.value_or(now) + std::chrono::seconds(*job.spec->ttl_seconds_after_finished);
    if (now >= expires) return {StepKind::DeleteExpired, "", "", std::nullopt};
    return idle(until(expires, now));
  }
  if (!job.spec) return {StepKind::Fail, job.spec_reason, job.spec_error, std::nullopt};
  const TransferJobSpec& spec = *job.spec;

  if (spec.suspend) {
    const bool settled =
        job.phase == phase::kSuspended && !run.transfer && !run.reshard && run.grants.empty();
    return settled ? idle() : Step{StepKind::Suspend, "", "", std::nullopt};
  }
  if (job.phase == phase::kSuspended) return {StepKind::Resume, "", "", std::nullopt};

  std::optional<TimePoint> deadline;
  if (job.start_time && spec.active_deadline_seconds) {
    deadline = *job.start_time + std::chrono::seconds(*spec.active_deadline_seconds);
    if (now >= *deadline && job.waiting) {
      // Held to the end: the cause is what it waited for (a node, pods), not a slow transfer.
      return {StepKind::Fail, job.waiting->reason,
              "activeDeadlineSeconds (" + std::to_string(*spec.active_deadline_seconds) +
                  " s) passed while " + job.waiting->message,
              std::nullopt};
    }
    if (now >= *deadline) {
      return {StepKind::Fail, reason::kDeadlineExceeded,
              "the job ran longer than activeDeadlineSeconds (" +
                  std::to_string(*spec.active_deadline_seconds) + " s); its transfer was cancelled",
              std::nullopt};
    }
  }
  // Whatever it waits for, a job with a deadline is looked at again no later than the deadline.
  auto by_deadline = [&](Step step) {
    if (step.wait && deadline) step.wait = std::min(*step.wait, until(*deadline, now));
    return step;
  };

  if (run.transfer) return by_deadline(follow_transfer(job, spec, seen, options));
  // A Reshard attempt's batches are many transfers: the reconciler looks at each and steps them
  // (reshard_run.h); its grants are held for the whole attempt, so they are no sign of a lost start.
  if (run.reshard) return by_deadline({StepKind::Track, "", "", options.poll_interval});
  if (!run.grants.empty()) return {StepKind::Fence, "", "", std::nullopt};
  if (run.not_before && now < *run.not_before) {
    return by_deadline({StepKind::WaitBackoff, "", "", until(*run.not_before, now)});
  }
  return {StepKind::StartAttempt, "", "", std::nullopt};
}

}  // namespace conduit::controller
