// The wire stage of a pipelined run (run_stream.cpp, docs/pipelines.md): each segment goes to the target as
// one batch of slices, and the next is posted while one completes, so the window never drains between
// segments. Segments complete oldest first. A batch that failed goes again, whole, when its turn comes, as
// any segment is retried; a failure that ends the stage leaves nothing of it on the wire.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "conduit/transport.h"
#include "transfer/batch_wakeup.h"
#include "transfer/run.h"
#include "transfer/stream/segment_feed.h"

namespace conduit::agent {

// Slices sent once more and waited for: what the land stage asks of the wire when the target found them
// different.
class Resend {
 public:
  virtual ~Resend() = default;
  // [at, +n) of segment `s`.
  virtual std::optional<run::Failure> resend(const SegmentFeed::Segment& s, std::uint64_t at,
                                             std::uint64_t n) = 0;
};

class WireStage final : public Resend {
 public:
  using Segment = SegmentFeed::Segment;
  using Progress = std::function<void(std::uint64_t)>;

  // Segments on the wire at once (measured: 1 GiB over tcp in 16 MiB segments, one at a time, spent about a
  // third of its wire time in the gaps between them).
  static constexpr std::size_t kDepth = 2;

  // What the stage asks of the run it is part of: the run decides when a batch is given up (its stop, its
  // stall timeout, its retries), and counts the stage's time, retries and progress.
  class Run {
   public:
    virtual ~Run() = default;
    // Until batch `id` finished (`error`: how it failed), or the run must stop: the Failure, with the batch
    // cancelled. `wakeup`: the batch's on_finished.
    virtual std::optional<run::Failure> watch(BatchId id, BatchWakeup& wakeup, const Progress& progress,
                                              std::optional<Error>& error) = 0;
    // `ops` as a batch of their own, waited for and retried as any segment is.
    virtual std::optional<run::Failure> send(const std::vector<Op>& ops, const Progress& progress) = 0;
    // Returns once none of batch `id`'s slices is in flight any more.
    virtual void cancel(BatchId id) = 0;
    virtual void retried() = 0;                            // a segment's batch failed and goes again
    virtual void segment_sent(double seconds) = 0;         // a batch finished, on its first try
    virtual void wire_busy(double seconds) = 0;            // something was on the wire this long
    virtual void reached(std::uint64_t range_offset) = 0;  // the batch in flight moved bytes up to here
  };

  // Where the range goes: range offset X to `offset` + X of the grant, or `offset` + X % ring_bytes of a
  // ring. Bytes of the range below `resume` are there already and are not sent.
  struct Placement {
    const RemoteKey& grant;
    std::uint64_t offset = 0;
    std::uint64_t ring_bytes = 0;
    std::uint64_t resume = 0;
  };

  WireStage(Run& run, Transport& transport, Placement placement, std::uint64_t slice_bytes,
            std::uint32_t window);
  WireStage(const WireStage&) = delete;
  WireStage& operator=(const WireStage&) = delete;
  ~WireStage() { abandon(); }

  bool empty() const { return flights_.empty(); }
  bool full() const { return flights_.size() >= kDepth; }
  // Posts segment `s`, which must stay where it is until it completed or was abandoned.
  void launch(const Segment& s);

  struct Completed {
    const Segment* segment = nullptr;     // all of it at the target
    std::optional<run::Failure> failure;  // or why the stage ended: nothing of it is left on the wire
  };
  // Waits for the oldest segment on the wire (a batch that failed sent again, synchronously).
  Completed complete_oldest();
  // Cancels what is on the wire, returning once none of it is in flight any more.
  void abandon();

  std::optional<run::Failure> resend(const Segment& s, std::uint64_t at, std::uint64_t n) override;

 private:
  // A batch whose submit failed has no id and is sent again when its turn comes; one with nothing to send
  // (a prefix already in place) has n == 0.
  struct Flight {
    const Segment* segment = nullptr;
    std::uint64_t at = 0;
    std::uint64_t n = 0;
    std::optional<BatchId> id;
    run::SteadyClock::time_point submitted;
  };

  std::vector<Op> ops_for(const Segment& s, std::uint64_t at, std::uint64_t n) const;
  Progress progress_of(const Segment& s, std::uint64_t at);
  // The oldest flight is over: forgets it and cancels the rest.
  Completed end(run::Failure failure);

  Run& run_;
  Transport& transport_;
  const Placement placement_;
  // One wakeup for every batch of the stage: the stage waits on the oldest, and any end may be it.
  const std::shared_ptr<BatchWakeup> wakeup_;
  const BatchOptions batch_options_;
  std::deque<Flight> flights_;  // oldest first
  run::SteadyClock::time_point busy_since_;
};

}  // namespace conduit::agent
