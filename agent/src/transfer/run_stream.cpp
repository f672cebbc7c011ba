// The pipelined run of one target (transfer/run.h, docs/pipelines.md): three stages over segments, each on
// its own thread, so a target costs about its slowest stage rather than their sum:
//   read     SegmentFeed's producer: a file read into a free slot, CRC32C of each slice as it passes;
//   wire     this thread (stream/wire_stage.h): the segment as one batch;
//   land     a landing report to the target agent (its CRC32C check, its save), in flight while the next
//            segment is on the wire (two in flight for a target that saves, so its disk never waits). A
//            segment counts as landed (committedBytes) once its report came back clean; its slot is then free
//            for a segment further on (stream/land_stage.h).
// The save is committed (fsync, rename) only after every report came back and the source file was found
// unchanged, so a target file never holds bytes that were not verified, nor a mix of two source files.
#include <algorithm>

#include "conduit/common/log.h"
#include "metrics/agent_metrics.h"
#include "transfer/run.h"
#include "transfer/stream/land_stage.h"
#include "transfer/stream/segment_feed.h"
#include "transfer/stream/wire_stage.h"

namespace conduit::agent {

using run::Failure;
using run::SteadyClock;
using namespace std::chrono_literals;

namespace {

constexpr int kFeedSlots = 4;
// A report per segment overlaps the next segment on the wire; 16 MiB keeps each report's work (a CRC32C and
// a write of 16 MiB) short against the wire's time for the next, and the first byte soon.
constexpr std::uint64_t kMaxStreamSegment = 16u << 20;
// A Chain hop forwards a segment only once it has landed on it, so each hop adds one segment's wire time to
// the chain's: segments of at most 1/64 of the range keep that fill under (hops - 1) / 64 of the
// point-to-point time (measured, 256 MiB over 1 Gbit/s links to 4 hops: 16 MiB segments made the chain
// 1.25x point-to-point).
constexpr std::uint64_t kChainSegmentsPerRange = 64;

// The error that stopped the feed, as the reason a caller reads.
Failure feed_failure(const Error& e) {
  const char* why = e.code == ErrorCode::Conflict ? reason::kSourceFileChanged
                    : e.code == ErrorCode::NotFound || e.code == ErrorCode::TimedOut
                        ? reason::kUpstreamLost
                        : reason::kTransportError;
  return Failure{TransferState::Failed, why, e.message};
}

}  // namespace

bool TransferRun::streams(std::size_t target) const {
  if (file || request.follow) return true;
  const api::TransferTarget& t = request.wire.targets[target];
  if (request.wire.op != OpKind::Write || t.grant_id.empty() || request.grants[target].staged) return false;
  // A grant id asks for landing reports: they verify, save, feed a Chain's next hop, and end in a commit
  // that gives the target region a new version.
  return source->memory().kind() == MemoryKind::Host;
}

// A Chain hop's feed: segment [.., end) goes out once the grant it forwards from has confirmed it, i.e.
// the bytes landed here (and were verified, with crc32c) before they go on.
std::function<Status(std::uint64_t, const std::function<bool()>&)> TransferRun::follow_gate(
    const run::Context& c) const {
  return [this, &c](std::uint64_t end, const std::function<bool()>& stopping) -> Status {
    const Follow& f = *request.follow;
    // Upstream may pause while the source routes around a dead hop (up to a stall timeout to notice,
    // then a new feeder): three stall timeouts without a byte is an upstream that is gone.
    const auto patience = 3 * c.options.stall_timeout;
    std::uint64_t seen = f.landing->confirmed();
    auto moved = SteadyClock::now();
    for (;;) {
      const std::uint64_t have = f.landing->wait_confirmed(end, 20ms);
      if (have >= end) return {};
      if (stopping()) return make_error(ErrorCode::Cancelled, "the feed stopped");
      if (auto s = stopped()) return make_error(ErrorCode::Cancelled, s->message);
      if (!f.granted()) {
        return make_error(ErrorCode::NotFound, "grant " + request.wire.follow_grant +
                                                   ", which this hop forwards from, was revoked or expired "
                                                   "after " +
                                                   std::to_string(have) + " bytes landed");
      }
      const auto now = SteadyClock::now();
      if (have > seen) {
        seen = have;
        moved = now;
      } else if (now - moved > patience) {
        return make_error(
            ErrorCode::TimedOut,
            "nothing landed on grant " + request.wire.follow_grant + " for " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(patience).count()) +
                " ms (" + std::to_string(have) + " bytes had)");
      }
    }
  };
}

void TransferRun::add_stage(double StageSeconds::*stage, double seconds) {
  std::lock_guard lock(mu);
  status.stages.*stage += seconds;
}

std::uint64_t TransferRun::stream_segment(const run::Context& c, std::size_t target) const {
  const api::TransferTarget& t = request.wire.targets[target];
  // A file's read-ahead: kFeedSlots segments within --pipeline-bytes.
  std::uint64_t segment = segment_bytes(
      c, file ? std::min(kMaxStreamSegment, c.options.pipeline_bytes / kFeedSlots) : kMaxStreamSegment);
  if (request.wire.chain || request.follow) {
    const std::uint64_t chunk = request.wire.chunk_bytes;
    const std::uint64_t share = (length / kChainSegmentsPerRange + chunk - 1) / chunk * chunk;
    segment = std::min(segment, std::max(share, chunk));
  }
  if (t.ring_bytes > 0) {
    // Equal segments that tile the ring, at least four: one being checked and saved by the target, two on
    // the wire, and the next one's place free.
    std::uint64_t parts = 4;
    while (t.ring_bytes / parts > segment && t.ring_bytes / (parts * 2) >= run::kMinRingSegment &&
           t.ring_bytes % (parts * 2) == 0)
      parts *= 2;
    segment = t.ring_bytes / parts;
  }
  return segment;
}

// This run as the stream's stages see it: its own watch, retries and stop, the status their time and
// progress go to, and the feed whose slots landed segments free, at the pace of a bandwidth cap.
class TransferRun::StreamRun final : public WireStage::Run, public LandStage::Run {
 public:
  StreamRun(TransferRun& run, const run::Context& c, std::size_t target)
      : run_(run), c_(c), target_(target), transport_(*run.transports[target]) {}

  // The source's segments of `shape`, from a file's read-ahead slots or from the source region in place.
  std::optional<Failure> open_feed(const SegmentFeed::Shape& shape);
  SegmentFeed& feed() { return *feed_; }
  // The read stage's time, and a file's bytes by where they were read from.
  void account_read();

  std::optional<Failure> watch(BatchId id, BatchWakeup& wakeup, const WireStage::Progress& progress,
                               std::optional<Error>& error) override {
    return run_.watch(c_, transport_, id, wakeup, progress, error);
  }
  std::optional<Failure> send(const std::vector<Op>& ops, const WireStage::Progress& progress) override {
    return run_.send_segment(c_, transport_, ops, progress);
  }
  void cancel(BatchId id) override { run_.cancel_batch(c_, transport_, id); }
  void retried() override {
    {
      std::lock_guard lock(run_.mu);
      ++run_.status.retries;
    }
    if (c_.metrics != nullptr) c_.metrics->slice_retried();
  }
  void segment_sent(double seconds) override {
    if (c_.metrics != nullptr) c_.metrics->observe_segment(seconds);
  }
  void wire_busy(double seconds) override { run_.add_stage(&StageSeconds::wire, seconds); }
  void reached(std::uint64_t range_offset) override { run_.set_target_bytes(target_, range_offset); }

  std::optional<Failure> landed(std::uint64_t end) override;
  void land_busy(double seconds) override { run_.add_stage(&StageSeconds::land, seconds); }
  void slices_resent(std::size_t slices) override {
    std::lock_guard lock(run_.mu);
    run_.status.slices_resent += static_cast<std::uint32_t>(slices);
  }

 private:
  TransferRun& run_;
  const run::Context& c_;
  const std::size_t target_;
  Transport& transport_;
  // A file's read-ahead slots: counted against the memory cap while the transfer runs, and taken from the
  // region pool when an earlier transfer's are kept (faulting in 64 MiB anew cost up to 70 ms a transfer
  // on a machine whose memory was full of page cache). Declared before the feed, which registers them.
  RegionPtr slots_;
  std::unique_ptr<SegmentFeed> feed_;
  SteadyClock::time_point began_;  // the feed opened: a bandwidth cap paces the bytes from here
  std::uint64_t begin_ = 0;        // the feed's first range offset
};

std::optional<Failure> TransferRun::StreamRun::open_feed(const SegmentFeed::Shape& shape) {
  const auto& file = run_.file;
  const ResolvedRequest& request = run_.request;
  if (file) {
    auto made = c_.regions.scratch(shape.segment * kFeedSlots,
                                   "the read-ahead of source file \"" + file->name + "\"");
    if (!made) return Failure{TransferState::Failed, reason::kRegistrationFailed, made.error().message};
    slots_ = std::move(*made);
  }
  // A file the page cache does not hold is read around it, but for a Fanout: each target reads the file, and
  // through the page cache the disk is read once for all of them.
  const bool direct_reads = request.wire.targets.size() == 1;
  const auto registering = SteadyClock::now();
  auto opened =
      file ? SegmentFeed::over_file(file->fd.get(), request.wire.offset, direct_reads, slots_->memory(),
                                    transport_, {}, shape)
           : SegmentFeed::over_memory(run_.source->memory().bytes().subspan(request.wire.offset, run_.length),
                                      run_.source_path(&transport_).registration(), shape);
  if (!opened) return Failure{TransferState::Failed, reason::kRegistrationFailed, opened.error().message};
  // A file's slots are registered here (a region source was registered when its path opened).
  if (file && c_.metrics != nullptr)
    c_.metrics->observe_registration(run::seconds(SteadyClock::now() - registering));
  feed_ = std::move(*opened);
  began_ = SteadyClock::now();
  begin_ = shape.begin;
  return std::nullopt;
}

void TransferRun::StreamRun::account_read() {
  run_.add_stage(&StageSeconds::read, feed_->busy_seconds());
  if (!run_.file || c_.metrics == nullptr) return;
  const auto bytes = feed_->file_bytes();
  c_.metrics->add_file_read("page_cache", static_cast<double>(bytes.cached));
  c_.metrics->add_file_read("direct", static_cast<double>(bytes.direct));
}

std::optional<Failure> TransferRun::StreamRun::landed(std::uint64_t end) {
  {
    std::lock_guard lock(run_.mu);
    run_.status.targets[target_].committed_bytes = end;
  }
  feed_->give_back();
  const ResolvedRequest& request = run_.request;
  if (request.wire.max_bytes_per_second > 0) {
    const auto due =
        began_ +
        std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(
            static_cast<double>(end - begin_) / static_cast<double>(request.wire.max_bytes_per_second)));
    return run_.pause(due - SteadyClock::now());
  }
  return std::nullopt;
}

std::optional<Failure> TransferRun::stream(const run::Context& c, std::size_t target) {
  const api::TransferTarget& t = request.wire.targets[target];
  const bool verify = request.wire.verify == Verify::Crc32c;
  // Told what landed whenever the target's grant takes reports (grantId): verified or not, a Chain's next
  // hop forwards only that, and the final commit gives the target region its new version.
  const bool reports = !t.grant_id.empty();
  // Bytes an earlier transfer left in place: with verify they are read, checksummed and reported but not
  // sent (the target names any slice that differs, which is then sent); without, the caller vouches.
  const std::uint64_t resume = t.resume_offset;
  const bool check_prefix = verify && reports && resume > 0;
  const SegmentFeed::Shape shape{.begin = check_prefix ? 0 : resume,
                                 .end = length,
                                 .segment = stream_segment(c, target),
                                 .slice = verify ? request.wire.chunk_bytes : 0,
                                 .slots = kFeedSlots,
                                 .gate = request.follow ? follow_gate(c) : nullptr};
  if (shape.begin >= shape.end) return std::nullopt;  // everything was in place already

  StreamRun run(*this, c, target);
  if (auto f = run.open_feed(shape)) return f;
  SegmentFeed& feed = run.feed();
  WireStage wire(run, *transports[target], {request.grants[target], t.offset, t.ring_bytes, resume},
                 request.wire.chunk_bytes, request.wire.window);
  TargetAgent agent(t.url, t.grant_id, c.peers, c.options.stall_timeout);
  LandStage land(
      run, wire, reports ? &agent : nullptr,
      {.grant_offset = t.ring_bytes > 0 ? 0 : t.offset, .slice = shape.slice, .depth = t.save ? 2u : 1u},
      {{"transfer", status.id}, {"target", std::to_string(target)}});
  // Every early return leaves nothing on the wire and no report running against a slot the feed may free.
  auto drain = [&](std::optional<Failure> f) {
    wire.abandon();
    land.abandon();
    run.account_read();
    return f;
  };
  for (;;) {
    if (auto f = stopped()) return drain(f);
    while (!wire.full()) {
      auto next = feed.next(wire.empty() ? 20ms : 0ms);
      if (!next) {
        if (auto f = stopped()) return drain(f);  // a forwarding feed gives up when the run stops
        return drain(feed_failure(next.error()));
      }
      if (*next == nullptr) break;
      wire.launch(**next);
    }
    if (wire.empty()) {
      if (feed.done()) break;
      continue;
    }
    auto sent = wire.complete_oldest();
    if (!sent.segment) return drain(std::move(sent.failure));
    if (auto f = land.take(*sent.segment)) return drain(f);
  }
  if (auto f = land.finish()) return drain(f);
  run.account_read();
  if (file) {
    if (auto same = file->unchanged(); !same)
      return Failure{TransferState::Failed, reason::kSourceFileChanged, same.error().message};
  }
  if (reports) {
    // Every byte reported landed (and verified): the target saves its file in place, and its region gets
    // a new version; never before this point, so a failed or partial write bumps nothing.
    const auto committing = SteadyClock::now();
    // The manifest describes a region from its offset 0: only a write that starts there carries it.
    const bool whole = !t.save && t.ring_bytes == 0 && t.region_offset == 0 && t.offset == 0;
    const api::Manifest* manifest = whole && request.wire.manifest ? &*request.wire.manifest : nullptr;
    auto committed =
        api::AgentClient(t.url, c.peers).commit(t.grant_id, t.save ? length : t.offset + length, manifest);
    add_stage(&StageSeconds::commit, run::seconds(SteadyClock::now() - committing));
    if (!committed)
      return landing_failure(committed.error(),
                             t.save ? "committing the target's file" : "committing the target's write");
  }
  return std::nullopt;
}

}  // namespace conduit::agent
