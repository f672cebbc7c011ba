#include "transfer/run.h"

#include <algorithm>
#include <system_error>
#include <thread>

#include "conduit/common/log.h"
#include "conduit/crc32c.h"
#include "conduit/cuda_staging.h"
#include "metrics/agent_metrics.h"
#include "transfer/staged/target_path.h"

namespace conduit::agent {

using run::Failure;
using run::SteadyClock;
using namespace std::chrono_literals;

namespace {

// The transport progresses batches on its own threads; this only watches. A batch's end wakes the watcher
// (BatchWakeup); between ends it looks this often for progress, cancel, deadline and shutdown.
constexpr auto kPollInterval = 200us;
using run::kVerifyRounds;

// A staging step that failed: the target agent's answer, or a copy between device and bounce slots.
Failure staging_failure(const Error& e) {
  return Failure{TransferState::Failed, run::reason_for(e.code), e.message};
}

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

const char* run::reason_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::PeerUnreachable:
      return reason::kPeerUnreachable;
    case ErrorCode::RemoteAccess:
      return reason::kAccessLost;
    case ErrorCode::Forbidden:
      return reason::kRemoteAccessDenied;
    case ErrorCode::TimedOut:
      return reason::kStalled;
    default:
      return reason::kTransportError;
  }
}

std::optional<Failure> TransferRun::stopped() const {
  switch (stop.load()) {
    case run::kCancel:
      return Failure{TransferState::Cancelled, reason::kCancelled, "cancelled by request"};
    case run::kShutdown:
      return Failure{TransferState::Failed, reason::kAgentShuttingDown, "the agent is shutting down"};
    default:
      break;
  }
  const std::chrono::seconds deadline(request.wire.deadline_seconds);
  if (deadline.count() > 0 && SteadyClock::now() >= created + deadline) {
    return Failure{TransferState::Failed, reason::kDeadlineExceeded,
                   "deadline of " + std::to_string(deadline.count()) + " s exceeded"};
  }
  return std::nullopt;
}

std::optional<Failure> TransferRun::pause(SteadyClock::duration d) const {
  const auto until = SteadyClock::now() + d;
  while (SteadyClock::now() < until) {
    if (auto f = stopped()) return f;
    std::this_thread::sleep_for(5ms);
  }
  return stopped();
}

const SourcePath& TransferRun::source_path(const Transport* transport) const {
  for (const SourcePath& p : paths_) {
    if (p.transport() == transport) return p;
  }
  std::abort();  // execute() opened one per transport before sending
}

void TransferRun::set_target_bytes(std::size_t target, std::uint64_t bytes) {
  std::lock_guard lock(mu);
  status.targets[target].bytes_done = bytes;
  status.bytes_done = 0;
  for (const TargetStatus& t : status.targets) status.bytes_done += t.bytes_done;
}

TransferStatus TransferRun::snapshot() const {
  std::lock_guard lock(mu);
  TransferStatus s = status;
  if (s.started_at) {
    const auto end = s.finished_at ? finished : SteadyClock::now();
    const double secs = run::seconds(end - started);
    // What this transfer moved, not what an earlier one left in place.
    const std::uint64_t moved = s.bytes_done > resumed_bytes ? s.bytes_done - resumed_bytes : 0;
    s.throughput_bytes_per_second = secs > 0 ? static_cast<double>(moved) / secs : 0;
  }
  return s;
}

void TransferRun::release() {
  paths_.clear();
  source.reset();
}

// Registrations must outlive every slice using them: the transport stops posting the batch, and the
// transport's own stall timeout bounds the wait for what is in flight. Past a shutdown deadline the agent
// closes its transports next, which ends those slices anyway.
void TransferRun::cancel_batch(const run::Context& c, Transport& transport, BatchId id) {
  if (!transport.cancel(id)) return;  // NotFound: already reported finished
  for (;;) {
    if (transport.poll(id).finished) return;
    const auto shutdown = SteadyClock::time_point(SteadyClock::duration(c.shutdown_deadline.load()));
    if (SteadyClock::now() >= shutdown) return;
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::optional<Failure> TransferRun::watch(const run::Context& c, Transport& transport, BatchId id,
                                          BatchWakeup& wakeup,
                                          const std::function<void(std::uint64_t)>& progress,
                                          std::optional<Error>& error) {
  const std::string direction = request.wire.op == OpKind::Write ? "write" : "read";
  std::uint64_t done = 0;
  auto last_move = SteadyClock::now();
  for (;;) {
    BatchStatus s = transport.poll(id);
    const auto now = SteadyClock::now();
    if (s.bytes_done > done) {
      if (const auto w = wire.find(&transport); w != wire.end())
        w->second.bytes.fetch_add(s.bytes_done - done, std::memory_order_relaxed);
      if (c.metrics != nullptr) {
        c.metrics->add_bytes(transport.capabilities().provider, direction,
                             static_cast<double>(s.bytes_done - done));
        if (request.follow) c.metrics->add_forwarded(static_cast<double>(s.bytes_done - done));
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
    if (!failure && now - last_move > c.options.stall_timeout) {
      failure = Failure{TransferState::Failed, reason::kStalled,
                        "no bytes moved for " + ms_text(c.options.stall_timeout)};
    }
    if (failure) {
      cancel_batch(c, transport, id);
      return failure;
    }
    wakeup.wait_for(kPollInterval);
  }
}

// The unit of resume is the segment, so a retry restarts the failed segment, never the transfer.
std::optional<Failure> TransferRun::send_segment(const run::Context& c, Transport& transport,
                                                 const std::vector<Op>& ops,
                                                 const std::function<void(std::uint64_t)>& progress) {
  const auto wakeup = std::make_shared<BatchWakeup>();
  const BatchOptions options{request.wire.chunk_bytes, request.wire.window, BatchWakeup::notifier(wakeup)};
  for (std::uint32_t attempt = 0;; ++attempt) {
    std::optional<Error> error;
    const auto submitted = SteadyClock::now();
    auto id = transport.submit(ops, options);
    if (id) {
      if (auto f = watch(c, transport, *id, *wakeup, progress, error)) return f;
      if (!error) {
        if (c.metrics != nullptr) c.metrics->observe_segment(run::seconds(SteadyClock::now() - submitted));
        return std::nullopt;
      }
    } else {
      error = id.error();
    }
    // A malformed op fails the same way every time. A batch the transport timed out has already gone the
    // whole stall timeout without a byte: retrying it would let a dead peer hold the transfer for
    // (1 + max_segment_retries) stall timeouts instead of the one --stall-timeout-ms promises.
    if (error->code == ErrorCode::InvalidArgument || error->code == ErrorCode::TimedOut ||
        attempt >= c.options.max_segment_retries) {
      std::string message = error->message;
      if (attempt > 0) message += " (after " + std::to_string(attempt) + " retries)";
      return Failure{TransferState::Failed, run::reason_for(error->code), std::move(message)};
    }
    {
      std::lock_guard lock(mu);
      ++status.retries;
    }
    if (c.metrics != nullptr) c.metrics->slice_retried();
    log::warn("retrying segment", {{"transfer", status.id}, {"error", error->message}});
    progress(0);
    // A peer that just dropped the connection is often back a moment later.
    if (auto f = pause(100ms * (attempt + 1))) return f;
  }
}

std::optional<Failure> TransferRun::send_range(
    const run::Context& c, std::size_t target, std::uint64_t begin, std::uint64_t end,
    std::uint64_t segment_bytes, const std::function<void(std::uint64_t)>& progress,
    const std::function<std::optional<Failure>(std::uint64_t)>& landed) {
  const api::TransferTarget& t = request.wire.targets[target];
  Transport& transport = *transports[target];
  TargetPath to(c.peers, {t.url, t.region, t.region_offset + t.offset, request.grants[target].staged},
                request.wire.op, begin);
  std::optional<Failure> failure;
  // Every failure of ours stops the walk with this marker error; `failure` says what happened.
  auto stop_walk = [&](Failure f) {
    failure = std::move(f);
    return make_error(ErrorCode::Cancelled, failure->message);
  };
  const Status walked =
      source_path(&transport)
          .walk(request.wire.op, begin, end, segment_bytes, [&](const SourcePath::Segment& s) -> Status {
            if (auto st = to.before(s.offset, s.length); !st) return stop_walk(staging_failure(st.error()));
            const std::vector<Op> ops{Op{request.wire.op, s.local, s.local_offset, request.grants[target],
                                         t.offset + s.offset, s.length}};
            if (auto f =
                    send_segment(c, transport, ops, [&](std::uint64_t done) { progress(s.offset + done); })) {
              return stop_walk(std::move(*f));
            }
            auto reached = to.after(s.offset, s.length);
            if (!reached) return stop_walk(staging_failure(reached.error()));
            if (*reached) {
              if (auto f = landed(**reached)) return stop_walk(std::move(*f));
            }
            return {};
          });
  if (failure) return failure;
  if (!walked) {
    return staging_failure(make_error(
        walked.error().code, "staging CUDA memory through host bounce buffers: " + walked.error().message));
  }
  auto reached = to.finish(end);
  if (!reached) return staging_failure(reached.error());
  if (*reached) return landed(**reached);
  return std::nullopt;
}

std::uint64_t TransferRun::segment_bytes(const run::Context& c, std::uint64_t most) const {
  std::uint64_t segment =
      std::min({c.options.segment_bytes,
                request.wire.chunk_bytes * request.wire.window * run::kWindowsPerSegment, most});
  // Under a bandwidth cap, about ten segments a second keep the pace even rather than bursty.
  if (request.wire.max_bytes_per_second > 0)
    segment = std::min(segment, request.wire.max_bytes_per_second / 10);
  return std::max(segment, request.wire.chunk_bytes);
}

std::optional<Failure> TransferRun::send(const run::Context& c, std::size_t target) {
  const api::TransferTarget& t = request.wire.targets[target];
  const std::uint64_t segment = segment_bytes(c, UINT64_MAX);
  const std::uint64_t rate = request.wire.max_bytes_per_second;
  const auto began = SteadyClock::now();
  const std::uint64_t first = t.resume_offset;
  return send_range(
      c, target, first, length, segment, [&](std::uint64_t reached) { set_target_bytes(target, reached); },
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

std::optional<Failure> TransferRun::verify(const run::Context& c, std::size_t target, std::uint64_t begin,
                                           std::uint64_t end) {
  const api::TransferTarget& t = request.wire.targets[target];
  const std::uint64_t slice = request.wire.chunk_bytes;
  const std::uint64_t length = end - begin;
  // Host memory directly; CUDA memory through a pinned buffer.
  auto crcs = cuda::region_crc32c_slices(source->memory(), request.wire.offset + begin, length, slice);
  if (!crcs) {
    return Failure{TransferState::Failed, reason::kChecksumMismatch,
                   "verify: crc32c of the source range: " + crcs.error().message};
  }
  const std::vector<std::uint32_t> mine = std::move(*crcs);

  for (int round = 0;; ++round) {
    if (auto f = stopped()) return f;
    auto theirs =
        api::AgentClient(t.url, c.peers)
            .checksum(t.region,
                      {.offset = t.region_offset + t.offset + begin, .length = length, .slice = slice});
    if (!theirs) {
      // A target that refuses us (403: the grant is not made for this node) is no checksum mismatch.
      const ErrorCode code = theirs.error().code;
      const bool refused = code == ErrorCode::PeerUnreachable || code == ErrorCode::RemoteAccess ||
                           code == ErrorCode::Forbidden;
      const char* why = refused ? run::reason_for(code) : reason::kChecksumMismatch;
      return Failure{TransferState::Failed, why, "verify: " + theirs.error().message};
    }
    if (theirs->crc32c.size() != mine.size()) {
      return Failure{TransferState::Failed, reason::kChecksumMismatch,
                     "verify: the target agent sent " + std::to_string(theirs->crc32c.size()) +
                         " checksums for " + std::to_string(mine.size()) + " slices"};
    }
    std::vector<std::size_t> bad;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (mine[i] != theirs->crc32c[i]) bad.push_back(i);
    }
    if (bad.empty()) return std::nullopt;
    if (round == kVerifyRounds) {
      return Failure{TransferState::Failed, reason::kChecksumMismatch,
                     std::to_string(bad.size()) + " of " + std::to_string(mine.size()) +
                         " slices differ after " + std::to_string(kVerifyRounds) +
                         " re-sends; first: slice " + std::to_string(bad[0]) + " at byte offset " +
                         std::to_string(begin + bad[0] * slice)};
    }
    // Adjacent bad slices go as one range: a wholesale mismatch then costs one op per segment, not per
    // slice.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // [begin, end) of the range
    for (std::size_t i : bad) {
      const std::uint64_t at = begin + i * slice;
      const std::uint64_t n = std::min(slice, end - at);
      if (!ranges.empty() && ranges.back().second == at &&
          ranges.back().second - ranges.back().first + n <= c.options.segment_bytes) {
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
      if (auto f = send_range(
              c, target, begin, end, c.options.segment_bytes, [](std::uint64_t) {},
              [](std::uint64_t) { return std::optional<Failure>(); })) {
        return f;
      }
    }
  }
}

std::optional<Failure> TransferRun::open_source(const run::Context& c, Transport& transport) {
  const MemoryRegion& memory = source->memory();
  const auto t0 = SteadyClock::now();
  const Capabilities& caps = transport.capabilities();
  // The rails nearest the source's memory; a staged source's bounce slots take its GPU's rails too.
  const RailChoice rails = c.transports.rails_for(transport, memory);
  {
    std::lock_guard lock(mu);
    if (const auto w = wire.find(&transport); w != wire.end()) w->second.rails = rails.rails;
    for (const auto& nic : rails.nics) {
      if (std::find(status.source_nics.begin(), status.source_nics.end(), nic) == status.source_nics.end())
        status.source_nics.push_back(nic);
    }
  }
  auto path = SourcePath::open(memory, transport, request.wire.offset, length, request.wire.chunk_bytes,
                               c.options.segment_bytes, rails.rails);
  if (!path) return Failure{TransferState::Failed, reason::kRegistrationFailed, path.error().message};
  if (path->staged()) {
    {
      std::lock_guard lock(mu);
      status.gpu_path = std::string(to_string(GpuPath::Staged));
    }
    if (c.metrics != nullptr) c.metrics->staged_fallback();
    log::info("CUDA source staged through host bounce buffers", {{"transfer", status.id},
                                                                 {"transport", std::string(transport.name())},
                                                                 {"why", caps.gpu_path_detail}});
  } else if (memory.kind() == MemoryKind::Cuda) {
    std::lock_guard lock(mu);
    // A staged path on another target's transport stays the visible one.
    if (status.gpu_path != to_string(GpuPath::Staged))
      status.gpu_path = std::string(to_string(caps.gpu_path));
  }
  paths_.push_back(std::move(*path));
  if (c.metrics != nullptr) c.metrics->observe_registration(run::seconds(SteadyClock::now() - t0));
  return std::nullopt;
}

std::optional<Failure> TransferRun::execute(const run::Context& c) {
  {
    std::lock_guard lock(mu);
    status.state = TransferState::Running;
    status.started_at = std::chrono::system_clock::now();
    started = SteadyClock::now();
  }
  if (auto f = stopped()) return f;

  // A file source registers its own read-ahead slots, per target.
  for (Transport* transport : file ? std::vector<Transport*>{} : transports) {
    if (std::any_of(paths_.begin(), paths_.end(),
                    [&](const SourcePath& p) { return p.transport() == transport; }))
      continue;
    if (auto f = open_source(c, *transport)) return f;
  }

  // Every target at once (a Fanout), each on its own thread with its own segments, retries and state: a
  // dead or slow target neither stops nor holds back the others. The transfer fails when any target did,
  // with the first failure as its reason; each target's own state says which ones have every byte. A
  // staged (CUDA) source has one set of bounce slots per transport, which one walk at a time may use, so
  // its targets go one after another.
  const std::size_t n = request.wire.targets.size();
  std::vector<std::optional<Failure>> failures(n);
  const bool staged =
      std::any_of(paths_.begin(), paths_.end(), [](const SourcePath& p) { return p.staged(); });
  if (n == 1 || staged) {
    for (std::size_t i = 0; i < n; ++i) failures[i] = run_target(c, i);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(n);
    try {
      for (std::size_t i = 0; i < n; ++i)
        threads.emplace_back([this, &c, &failures, i] { failures[i] = run_target(c, i); });
    } catch (const std::system_error& e) {
      // No thread for the rest: stop the ones started, and let them end before anything is released.
      stop.store(run::kCancel);
      for (auto& t : threads) t.join();
      return Failure{TransferState::Failed, reason::kTransportError,
                     std::string("cannot start a thread per target: ") + e.what()};
    }
    for (auto& t : threads) t.join();
  }
  std::size_t failed = 0;
  std::optional<Failure> first;
  for (auto& f : failures) {
    if (!f) continue;
    ++failed;
    if (!first) first = std::move(f);
  }
  if (first) {
    if (n > 1) {
      first->message =
          std::to_string(failed) + " of " + std::to_string(n) + " targets failed; first: " + first->message;
    }
    return first;
  }
  std::lock_guard lock(mu);
  status.verified = request.wire.verify == Verify::Crc32c;
  return std::nullopt;
}

TransferRun::Strategy TransferRun::strategy_of(std::size_t i) const {
  if (request.wire.chain && i > 0) return Strategy::ChainHop;
  return streams(i) ? Strategy::Stream : Strategy::SendThenVerify;
}

std::optional<Failure> TransferRun::send_then_verify(const run::Context& c, std::size_t i) {
  const auto began = SteadyClock::now();
  auto failure = send(c, i);
  add_stage(&StageSeconds::wire, run::seconds(SteadyClock::now() - began));
  if (!failure && request.wire.verify == Verify::Crc32c) {
    const auto verifying = SteadyClock::now();
    failure = verify(c, i, 0, length);
    add_stage(&StageSeconds::land, run::seconds(SteadyClock::now() - verifying));
  }
  return failure;
}

std::optional<Failure> TransferRun::run_target(const run::Context& c, std::size_t i) {
  {
    std::lock_guard lock(mu);
    status.targets[i].state = TransferState::Running;
  }
  std::optional<Failure> failure;
  switch (strategy_of(i)) {
    case Strategy::ChainHop:
      failure = forward(c, i);
      break;
    case Strategy::Stream:
      failure = stream(c, i);
      break;
    case Strategy::SendThenVerify:
      failure = send_then_verify(c, i);
      break;
  }
  // A cancel that came while the target was failing is why it failed: whoever cancels a transfer (the
  // controller, for a deleted job) revokes its grants at once, so a report in flight may meet its grant gone
  // before this run saw the stop. The transfer then ends Cancelled, as asked, not Failed with AccessLost.
  if (failure && failure->state == TransferState::Failed && stop.load() == run::kCancel) failure = stopped();
  std::lock_guard lock(mu);
  if (failure) {
    // What went wrong at a target says which agent: a job of many targets fails with one of their errors.
    const std::string_view why = failure->reason;
    const bool ours = why == reason::kCancelled || why == reason::kAgentShuttingDown ||
                      why == reason::kDeadlineExceeded || why == reason::kSourceFileChanged ||
                      why == reason::kRegistrationFailed;
    if (!ours && !request.wire.targets[i].url.empty()) {
      failure->message = "target agent at " + request.wire.targets[i].url + ": " + failure->message;
    }
    status.targets[i].state = failure->state;
    status.targets[i].last_error = failure->message;
    return failure;
  }
  status.targets[i].state = TransferState::Succeeded;
  return std::nullopt;
}

}  // namespace conduit::agent
