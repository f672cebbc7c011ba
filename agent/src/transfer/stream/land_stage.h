// The land stage of a pipelined run (run_stream.cpp, docs/pipelines.md). One-sided RMA tells the target
// nothing as bytes land, so each segment whose batch finished is reported to the target agent
// (stream/landing.h), which checks it, and saves it, while the next segment is on the wire. The stage keeps
// those reports in flight and settles them oldest first: slices the target found different are sent again
// (at most run::kVerifyRounds times), and a segment counts as landed only once its report came back clean,
// so the range's landed bytes grow in order whichever report is answered first.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <optional>
#include <string>

#include "conduit/api/agent_client.h"
#include "conduit/common/log.h"
#include "transfer/run.h"
#include "transfer/stream/segment_feed.h"
#include "transfer/stream/wire_stage.h"

namespace conduit::agent {

class LandStage {
 public:
  using Segment = SegmentFeed::Segment;

  // The target agent's end of the reports (POST /v1/grants/{id}/landed), called on a thread of the
  // report's own: two reports in flight are two calls at once.
  class Target {
   public:
    virtual ~Target() = default;
    virtual Result<api::Landed> landed(const api::LandedReport& report) = 0;
  };

  // What the stage asks of the run it is part of.
  class Run {
   public:
    virtual ~Run() = default;
    // The range's bytes below `end` that this run sends are where they belong (verified, saved): the run
    // records it and frees the oldest segment's slot. A Failure (a stop while it paces) ends the stage.
    virtual std::optional<run::Failure> landed(std::uint64_t end) = 0;
    // Reports were out this much longer (two out at once count once).
    virtual void land_busy(double seconds) = 0;
    // The target found this many slices different; they are sent again.
    virtual void slices_resent(std::size_t slices) = 0;
  };

  struct Shape {
    // Range offset 0 in the grant's offsets, as a report names bytes (0 for a ring, which maps range offsets
    // itself).
    std::uint64_t grant_offset = 0;
    std::uint64_t slice = 0;  // bytes per CRC32C; 0: none
    // Reports in flight at most. A target that saves writes each segment to its file while answering its
    // report: two keep its disk busy, the next segment's check and report overlapping the previous one's
    // write. Without a save a report is a check in memory, done long before the next segment; one in flight
    // leaves a file's read-ahead its slot.
    std::size_t depth = 1;
  };

  // `target`: null when the target takes no reports, where a segment lands once its batch finished. `wire`
  // sends again what the target found different. `who`: the log fields that name the transfer and target.
  LandStage(Run& run, Resend& wire, Target* target, Shape shape, log::Fields who);
  LandStage(const LandStage&) = delete;
  LandStage& operator=(const LandStage&) = delete;
  ~LandStage() { abandon(); }

  // Segment `s` is all at the target (its batch finished): reported, once fewer than `depth` reports are
  // out (the oldest settled first, and landed).
  std::optional<run::Failure> take(const Segment& s);
  // Settles every report still out, in order.
  std::optional<run::Failure> finish();
  // Waits for the reports still out and forgets them: after a failure, before the feed frees their slots.
  void abandon();
  // One, from the first time a target agent refused a report that waits for the one before it (a version
  // from before waitForPrevious).
  std::size_t depth() const { return shape_.depth; }

 private:
  // The report's answer and when it came: the stage's own time is the report's round trip, not the time
  // the run got round to reading the answer (it sends the next segment meanwhile).
  struct Answer {
    Result<api::Landed> landed;
    run::SteadyClock::time_point at;
  };
  struct Pending {
    const Segment* segment = nullptr;
    std::future<Answer> answer;
    run::SteadyClock::time_point sent;
    bool waits = false;  // sent with waitForPrevious
  };

  // `after_another`: the report before this one is still out (the target waits for it, stream/landing.h).
  Result<Pending> report(const Segment& s, bool after_another);
  Answer answer_of(Pending& p);
  std::optional<run::Failure> settle(Pending& p);
  std::optional<run::Failure> settle_oldest();

  Run& run_;
  Resend& wire_;
  Target* const target_;
  Shape shape_;
  const log::Fields who_;
  std::deque<Pending> pending_;  // oldest first
  // The land stage's time: while a report is out (two overlapping count once).
  run::SteadyClock::time_point busy_until_{};
};

// A target agent's answer that failed (to a report, or to the commit that ends a save) as the run's end.
// `what`: what was being done.
run::Failure landing_failure(const Error& e, const char* what);

// The target agent over its REST API. A report waits no longer than a batch may go without bytes: a target
// cut off is then noticed as soon as the wire would notice it (a stop waits for the report in flight).
class TargetAgent final : public LandStage::Target {
 public:
  TargetAgent(std::string url, std::string grant_id, const api::ClientOptions& peers,
              std::chrono::milliseconds stall_timeout);
  Result<api::Landed> landed(const api::LandedReport& report) override;

 private:
  std::string url_;
  std::string grant_id_;
  api::ClientOptions options_;
};

}  // namespace conduit::agent
