#include "transfer_job.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "conduit/crc32c.h"
#include "conduit/cuda_staging.h"
#include "conduit/log.h"
#include "metrics/agent_metrics.h"

namespace conduit::agent {

using job::Failure;
using job::SteadyClock;
using namespace std::chrono_literals;

namespace {

// The transport progresses batches on its own threads; this only watches. Short enough that a segment's
// end costs little idle wire time, and that cancel, deadline and shutdown are seen at once.
constexpr auto kPollInterval = 200us;
// A stop waits this long at most for the batch in flight before parking its registrations.
constexpr auto kDrainLimit = 2s;
// A stop waits for the segment in flight, so a segment spans at most this many full windows: with a tiny
// window and chunk, a 64 MiB segment would otherwise take seconds to drain.
constexpr std::uint64_t kWindowsPerSegment = 256;
constexpr int kVerifyRounds = 2;

const char* reason_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::PeerUnreachable:
      return reason::kPeerUnreachable;
    case ErrorCode::RemoteAccess:
      return reason::kRemoteAccessDenied;
    case ErrorCode::TimedOut:
      return reason::kStalled;
    default:
      return reason::kTransportError;
  }
}

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

std::optional<Failure> TransferManager::Transfer::stopped() const {
  switch (stop.load()) {
    case job::kCancel:
      return Failure{TransferState::Cancelled, reason::kCancelled, "cancelled by request"};
    case job::kShutdown:
      return Failure{TransferState::Failed, reason::kAgentShuttingDown, "the agent is shutting down"};
    default:
      break;
  }
  if (request.deadline.count() > 0 && SteadyClock::now() >= created + request.deadline) {
    return Failure{TransferState::Failed, reason::kDeadlineExceeded,
                   "deadline of " + std::to_string(request.deadline.count()) + " s exceeded"};
  }
  return std::nullopt;
}

std::optional<Failure> TransferManager::Transfer::pause(SteadyClock::duration d) const {
  const auto until = SteadyClock::now() + d;
  while (SteadyClock::now() < until) {
    if (auto f = stopped()) return f;
    std::this_thread::sleep_for(5ms);
  }
  return stopped();
}

const Registration& TransferManager::Transfer::registration(const Transport* transport) const {
  for (const auto& [t, reg] : registrations) {
    if (t == transport) return reg;
  }
  std::abort();  // execute() registered one per transport before sending
}

void TransferManager::Transfer::set_target_bytes(std::size_t target, std::uint64_t bytes) {
  std::lock_guard lock(mu);
  status.targets[target].bytes_done = bytes;
  status.bytes_done = 0;
  for (const TargetStatus& t : status.targets) status.bytes_done += t.bytes_done;
}

TransferStatus TransferManager::Transfer::snapshot() const {
  std::lock_guard lock(mu);
  TransferStatus s = status;
  if (s.started_at) {
    const auto end = s.finished_at ? finished : SteadyClock::now();
    const double secs = job::seconds(end - started);
    // What this transfer moved, not what an earlier one left in place.
    const std::uint64_t moved = s.bytes_done > resumed_bytes ? s.bytes_done - resumed_bytes : 0;
    s.throughput_bytes_per_second = secs > 0 ? static_cast<double>(moved) / secs : 0;
  }
  return s;
}

// Registrations must outlive every batch using them. A transport fails a batch that stops completing, so
// this normally ends; if it does not, the registrations are parked rather than freed under the NIC.
void TransferManager::Transfer::drain(TransferManager& m, Transport& transport, BatchId id) {
  const auto own_limit = SteadyClock::now() + kDrainLimit;
  for (;;) {
    if (transport.poll(id).finished) return;
    const auto shutdown_limit = SteadyClock::time_point(SteadyClock::duration(m.drain_until_.load()));
    if (SteadyClock::now() >= std::min(own_limit, shutdown_limit)) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  undrained_transport = &transport;
  undrained_batch = id;
}

std::optional<Failure> TransferManager::Transfer::watch(TransferManager& m, Transport& transport, BatchId id,
                                                        const std::function<void(std::uint64_t)>& progress,
                                                        std::optional<Error>& error) {
  const std::string direction = request.op == OpKind::Write ? "write" : "read";
  std::uint64_t done = 0;
  auto last_move = SteadyClock::now();
  for (;;) {
    BatchStatus s = transport.poll(id);
    const auto now = SteadyClock::now();
    if (s.bytes_done > done) {
      if (m.metrics_ != nullptr) {
        m.metrics_->add_bytes(transport.capabilities().provider, direction,
                              static_cast<double>(s.bytes_done - done));
      }
      done = s.bytes_done;
      last_move = now;
      progress(done);
    }
    if (s.finished) {
      error = std::move(s.error);
      return std::nullopt;
    }
    auto failure = stopped();
    // The transport's own stall timer counts completions, which a misbehaving peer or provider can keep
    // producing without moving data; bytes are what the caller waits for.
    if (!failure && now - last_move > m.options_.stall_timeout) {
      failure = Failure{TransferState::Failed, reason::kStalled,
                        "no bytes moved for " + ms_text(m.options_.stall_timeout)};
    }
    if (failure) {
      drain(m, transport, id);
      return failure;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

// One batch of ops, retried whole on a transport error: the unit of resume is the batch, so a retry
// restarts the failed segment, never the transfer.
std::optional<Failure> TransferManager::Transfer::move(TransferManager& m, Transport& transport,
                                                       const std::vector<Op>& ops,
                                                       const std::function<void(std::uint64_t)>& progress) {
  const BatchOptions options{request.chunk_bytes, request.window};
  for (std::uint32_t attempt = 0;; ++attempt) {
    std::optional<Error> error;
    const auto submitted = SteadyClock::now();
    auto id = transport.submit(ops, options);
    if (id) {
      if (auto f = watch(m, transport, *id, progress, error)) return f;
      if (!error) {
        if (m.metrics_ != nullptr) m.metrics_->observe_segment(job::seconds(SteadyClock::now() - submitted));
        return std::nullopt;
      }
    } else {
      error = id.error();
    }
    // A malformed op fails the same way every time. A batch the transport timed out has already gone the
    // whole stall timeout without a byte: retrying it would let a dead peer hold the transfer for
    // (1 + max_segment_retries) stall timeouts instead of the one --stall-timeout-ms promises.
    if (error->code == ErrorCode::InvalidArgument || error->code == ErrorCode::TimedOut ||
        attempt >= m.options_.max_segment_retries) {
      std::string message = error->message;
      if (attempt > 0) message += " (after " + std::to_string(attempt) + " retries)";
      return Failure{TransferState::Failed, reason_for(error->code), std::move(message)};
    }
    {
      std::lock_guard lock(mu);
      ++status.retries;
    }
    if (m.metrics_ != nullptr) m.metrics_->slice_retried();
    log::warn("retrying segment", {{"transfer", status.id}, {"error", error->message}});
    progress(0);
    // A peer that just dropped the connection is often back a moment later.
    if (auto f = pause(100ms * (attempt + 1))) return f;
  }
}

std::optional<Failure> TransferManager::Transfer::send(TransferManager& m, std::size_t target) {
  const TransferTarget& t = request.targets[target];
  const std::uint64_t by_window = request.chunk_bytes * request.window * kWindowsPerSegment;
  std::uint64_t segment = std::max(request.chunk_bytes, std::min(m.options_.segment_bytes, by_window));
  const std::uint64_t rate = request.max_bytes_per_second;
  // Under a bandwidth cap, about ten segments a second keep the pace even rather than bursty.
  if (rate > 0) segment = std::max(request.chunk_bytes, std::min(segment, rate / 10));
  const auto began = SteadyClock::now();
  const std::uint64_t first = t.resume_offset;
  return move_range(
      m, target, first, length, segment, [&](std::uint64_t reached) { set_target_bytes(target, reached); },
      [&](std::uint64_t landed) -> std::optional<Failure> {
        {
          // The batch finished (and a staged target copied it to its device), so these bytes are in the
          // target's memory (the transport's delivery proof).
          std::lock_guard lock(mu);
          status.targets[target].committed_bytes = landed;
        }
        if (rate > 0) {
          const auto due =
              began + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(
                          static_cast<double>(landed - first) / static_cast<double>(rate)));
          if (auto f = pause(due - SteadyClock::now())) return f;
        }
        return std::nullopt;
      });
}

std::optional<Failure> TransferManager::Transfer::verify(TransferManager& m, std::size_t target) {
  const TransferTarget& t = request.targets[target];
  const std::uint64_t slice = request.chunk_bytes;
  // Host memory directly; CUDA memory through a pinned buffer.
  auto crcs = cuda::region_crc32c_slices(source->memory(), request.offset, length, slice);
  if (!crcs) {
    return Failure{TransferState::Failed, reason::kChecksumMismatch,
                   "verify: crc32c of the source range: " + crcs.error().message};
  }
  const std::vector<std::uint32_t> mine = std::move(*crcs);

  for (int round = 0;; ++round) {
    if (auto f = stopped()) return f;
    auto theirs = m.peers_.checksum(t.url, t.region, t.region_offset + t.offset, length, slice);
    if (!theirs) {
      const char* why = theirs.error().code == ErrorCode::PeerUnreachable ? reason::kPeerUnreachable
                                                                          : reason::kChecksumMismatch;
      return Failure{TransferState::Failed, why, "verify: " + theirs.error().message};
    }
    if (theirs->size() != mine.size()) {
      return Failure{TransferState::Failed, reason::kChecksumMismatch,
                     "verify: the target agent sent " + std::to_string(theirs->size()) + " checksums for " +
                         std::to_string(mine.size()) + " slices"};
    }
    std::vector<std::size_t> bad;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (mine[i] != (*theirs)[i]) bad.push_back(i);
    }
    if (bad.empty()) return std::nullopt;
    if (round == kVerifyRounds) {
      return Failure{TransferState::Failed, reason::kChecksumMismatch,
                     std::to_string(bad.size()) + " of " + std::to_string(mine.size()) +
                         " slices differ after " + std::to_string(kVerifyRounds) +
                         " re-sends; first: slice " + std::to_string(bad[0]) + " at byte offset " +
                         std::to_string(bad[0] * slice)};
    }
    // Adjacent bad slices go as one range: a wholesale mismatch then costs one op per segment, not per
    // slice.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // [begin, end) of the range
    for (std::size_t i : bad) {
      const std::uint64_t at = i * slice;
      const std::uint64_t n = std::min(slice, length - at);
      if (!ranges.empty() && ranges.back().second == at &&
          ranges.back().second - ranges.back().first + n <= m.options_.segment_bytes) {
        ranges.back().second += n;
      } else {
        ranges.emplace_back(at, at + n);
      }
    }
    {
      std::lock_guard lock(mu);
      status.slices_resent += static_cast<std::uint32_t>(bad.size());
    }
    log::warn("re-sending mismatching slices", {{"transfer", status.id},
                                                {"target", std::to_string(target)},
                                                {"slices", std::to_string(bad.size())}});
    for (const auto& [begin, end] : ranges) {
      if (auto f = move_range(
              m, target, begin, end, m.options_.segment_bytes, [](std::uint64_t) {},
              [](std::uint64_t) { return std::optional<Failure>(); })) {
        return f;
      }
    }
  }
}

std::optional<Failure> TransferManager::Transfer::execute(TransferManager& m) {
  {
    std::lock_guard lock(mu);
    status.state = TransferState::Running;
    status.started_at = std::chrono::system_clock::now();
    started = SteadyClock::now();
  }
  if (auto f = stopped()) return f;

  // Once per transport, not per target: a fan-out over one provider pins the source pages once.
  for (Transport* transport : transports) {
    if (std::any_of(registrations.begin(), registrations.end(),
                    [&](auto& r) { return r.first == transport; }) ||
        staged_source(transport) != nullptr) {
      continue;
    }
    if (auto f = prepare(m, *transport)) return f;
  }

  for (std::size_t i = 0; i < request.targets.size(); ++i) {
    {
      std::lock_guard lock(mu);
      status.targets[i].state = TransferState::Running;
    }
    auto failure = send(m, i);
    if (!failure && request.verify == Verify::Crc32c) failure = verify(m, i);
    std::lock_guard lock(mu);
    if (failure) {
      status.targets[i].state = failure->state;
      status.targets[i].last_error = failure->message;
      return failure;
    }
    status.targets[i].state = TransferState::Succeeded;
  }
  std::lock_guard lock(mu);
  status.verified = request.verify == Verify::Crc32c;
  return std::nullopt;
}

}  // namespace conduit::agent
