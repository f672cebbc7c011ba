// One transfer as its worker thread runs it: open the source on each transport, send each target's range
// in segments (the unit of retry) with bounded retries, verify, and stop promptly on cancel, deadline,
// shutdown or a stall, cancelling the batch in flight. The GPU specifics live in staged/: the run opens one
// SourcePath per transport and walks each range through it with a TargetPath, and staged/ calls nothing
// back but the segment sender it was handed. Used within transfer/ only: the manager starts runs, the scatter
// executor drives scatter runs, run_stream.cpp and run_chain.cpp are its pipelined and Chain paths.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conduit/api/agent_client.h"
#include "regions.h"
#include "transfer/batch_wakeup.h"
#include "transfer/options.h"
#include "transfer/request.h"
#include "transfer/staged/source_path.h"
#include "transfer/status.h"
#include "transport_set.h"

namespace conduit::metrics {
class AgentMetrics;
}

namespace conduit::agent {

namespace run {

using SteadyClock = std::chrono::steady_clock;

enum StopCause : int { kRun = 0, kCancel = 1, kShutdown = 2 };

// A ring target's segments are at least this big (and a ring holds at least two of them).
inline constexpr std::uint64_t kMinRingSegment = 4u << 10;
// A segment spans at most this many full windows: a retry re-sends the whole segment, and with a tiny
// window and slice a 64 MiB segment would take seconds.
inline constexpr std::uint64_t kWindowsPerSegment = 256;
// Re-sends of the slices that differ before a transfer fails with ChecksumMismatch.
inline constexpr int kVerifyRounds = 2;

// How a transfer ended when it did not succeed.
struct Failure {
  TransferState state = TransferState::Failed;
  const char* reason = reason::kTransportError;
  std::string message;
};

// A transport error as the reason a caller reads.
const char* reason_for(ErrorCode code);

inline double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

// What a run uses of the agent around it; the TransferManager's, outliving every run.
struct Context {
  const TransportSet& transports;
  const api::ClientOptions& peers;
  metrics::AgentMetrics* metrics;
  const TransferOptions& options;
  // A file source's read-ahead slots come from here: counted against the memory cap, and reused from the
  // region pool rather than faulted in anew for every transfer.
  RegionStore& regions;
  // Set by shutdown(): past it a stopped run no longer waits for its cancelled batch to be reaped.
  const std::atomic<SteadyClock::rep>& shutdown_deadline;
};

}  // namespace run

class TransferRun {
 public:
  // Fixed by TransferManager::start().
  std::uint64_t seq = 0;
  ResolvedRequest request;
  std::uint64_t length = 0;            // resolved: never 0
  std::uint64_t resumed_bytes = 0;     // the targets' resume offsets together: in bytes_done, not moved here
  std::vector<Transport*> transports;  // per target
  run::SteadyClock::time_point created;
  std::atomic<int> stop{run::kRun};
  RegionUse source;                // a region source
  std::optional<SourceFile> file;  // a file source: read as it goes out
  // What each of `transports` put on the wire (every retry and re-send included), and the rails it used
  // (open_source; empty: every rail): the plan its proof of path is judged on (path/prover.h). The map is
  // filled by start() and only its counts change after; rails under `mu`.
  struct Wire {
    std::atomic<std::uint64_t> bytes{0};
    std::vector<std::uint32_t> rails;
  };
  std::map<const Transport*, Wire> wire;

  // Written by the worker, read by get() and list() at any moment.
  mutable std::mutex mu;
  TransferStatus status;
  run::SteadyClock::time_point started, finished;

  // A scatter-gather transfer's local side: the source region's registration, kept by the region.
  std::shared_ptr<const Registration> scatter_local;
  // A scatter-gather transfer's batch (scatter_executor.h), watched by the executor and by whoever waits on
  // the transfer: the first to see its end settles it, once.
  struct Scatter {
    std::mutex mu;
    std::optional<BatchId> batch;
    bool cancelling = false;
    std::optional<run::Failure> why;  // set when it was cancelled: the end to report
    bool settled = false;
  };
  Scatter scatter;
  // The batch's end (BatchOptions::on_finished) wakes the callers waiting on the transfer, if any, else the
  // executor: a waiter settles the transfer itself, one thread wake-up sooner than through the executor.
  struct BatchEnd {
    BatchWakeup waiter;
    std::atomic<int> waiters{0};
  };
  std::shared_ptr<BatchEnd> batch_end = std::make_shared<BatchEnd>();

  // Why the run must end now: cancelled, the agent shutting down, or past its deadline.
  std::optional<run::Failure> stopped() const;
  // The worker's whole job. On return nothing of this run is in flight any more (past a shutdown deadline
  // excepted), so release() may free what its batches used.
  std::optional<run::Failure> execute(const run::Context& c);
  // The source paths (registrations, staged sources), then the source region; before the end state shows.
  void release();
  TransferStatus snapshot() const;

 private:
  std::optional<run::Failure> open_source(const run::Context& c, Transport& transport);
  // How one target's range goes, chosen once per target (strategy_of) and named in the run's code:
  //   Stream          pipelined, each segment reported as it lands (run_stream.cpp): a file source, a
  //                   target that takes landing reports, a Chain hop's forwarding transfer;
  //   ChainHop        a Chain's hop >= 1, fed by the hop before it (run_chain.cpp);
  //   SendThenVerify  the range sent in segments, then its checksums compared when asked (run.cpp).
  enum class Strategy : std::uint8_t { Stream, ChainHop, SendThenVerify };
  Strategy strategy_of(std::size_t target) const;
  // One target's whole range by its strategy; sets its state. Runs beside the others.
  std::optional<run::Failure> run_target(const run::Context& c, std::size_t target);
  std::optional<run::Failure> send_then_verify(const run::Context& c, std::size_t target);
  const SourcePath& source_path(const Transport* transport) const;
  // Bytes per segment: the agent's --segment-bytes, at most kWindowsPerSegment windows and `most`, about a
  // tenth of a second under a bandwidth cap, and never below one slice.
  std::uint64_t segment_bytes(const run::Context& c, std::uint64_t most) const;
  std::optional<run::Failure> send(const run::Context& c, std::size_t target);
  // [begin, end) of the range against the target region's checksums, after the bytes were sent.
  std::optional<run::Failure> verify(const run::Context& c, std::size_t target, std::uint64_t begin,
                                     std::uint64_t end);
  // Pipelined (run_stream.cpp): the source read (a file) or checksummed ahead of the wire, each
  // segment reported to the target as it lands (verified there, saved there), the save committed at the
  // end. For a file source, and for a target that takes landing reports.
  bool streams(std::size_t target) const;
  std::optional<run::Failure> stream(const run::Context& c, std::size_t target);
  // This run as the stream's stages see it (stream/wire_stage.h, stream/land_stage.h).
  class StreamRun;
  using Follow = ResolvedRequest::Follow;
  std::function<Status(std::uint64_t, const std::function<bool()>&)> follow_gate(const run::Context& c) const;
  // Chain (run_chain.cpp): hop `target` (>= 1) fed by the nearest earlier hop that still answers,
  // through a forwarding transfer started on that hop's agent; by this agent itself when none does.
  std::optional<run::Failure> forward(const run::Context& c, std::size_t target);
  std::uint64_t stream_segment(const run::Context& c, std::size_t target) const;
  void add_stage(double StageSeconds::*stage, double seconds);
  // [begin, end) of the range to or from target `target`, in segments of at most `segment_bytes`.
  // progress(range offset reached); landed(range offset below which every byte is at the target).
  std::optional<run::Failure> send_range(
      const run::Context& c, std::size_t target, std::uint64_t begin, std::uint64_t end,
      std::uint64_t segment_bytes, const std::function<void(std::uint64_t)>& progress,
      const std::function<std::optional<run::Failure>(std::uint64_t)>& landed);
  // One segment as one batch, retried whole on a transport error.
  std::optional<run::Failure> send_segment(const run::Context& c, Transport& transport,
                                           const std::vector<Op>& ops,
                                           const std::function<void(std::uint64_t)>& progress);
  // Until the batch finished (error: how), or a stop (the Failure). `wakeup`: the batch's on_finished.
  std::optional<run::Failure> watch(const run::Context& c, Transport& transport, BatchId id,
                                    BatchWakeup& wakeup, const std::function<void(std::uint64_t)>& progress,
                                    std::optional<Error>& error);
  void cancel_batch(const run::Context& c, Transport& transport, BatchId id);
  std::optional<run::Failure> pause(run::SteadyClock::duration d) const;
  void set_target_bytes(std::size_t target, std::uint64_t bytes);

  // Per transport, not per target: a fan-out over one provider pins the source pages once. Released
  // before `source`, whose memory a staged source's copier reads.
  std::vector<SourcePath> paths_;
};

}  // namespace conduit::agent
