// The pipelined run of one target (transfer/run.h, docs/pipelines.md): three stages over segments, each on
// its own thread, so a target costs about its slowest stage rather than their sum:
//   read     SegmentFeed's producer: a file read into a free slot, CRC32C of each slice as it passes;
//   wire     this thread: the segment as one batch;
//   land     a landing report to the target agent (its CRC32C check, its save), in flight while the next
//            segment is on the wire (two in flight for a target that saves, so its disk never waits). A
//            segment counts as landed (committedBytes) once its report came back clean; its slot is then free
//            for a segment further on.
// The save is committed (fsync, rename) only after every report came back and the source file was found
// unchanged, so a target file never holds bytes that were not verified, nor a mix of two source files.
#include <algorithm>
#include <deque>
#include <future>
#include <thread>

#include "conduit/common/log.h"
#include "metrics/agent_metrics.h"
#include "transfer/run.h"
#include "transfer/stream/segment_feed.h"

namespace conduit::agent {

using run::Failure;
using run::SteadyClock;
using namespace std::chrono_literals;

namespace {

constexpr int kFeedSlots = 4;
// Segments on the wire at once: the next is in flight while one completes, so the window never drains
// between segments (measured: 1 GiB over tcp in 16 MiB segments, one at a time, spent about a third of its
// wire time in those gaps).
constexpr std::size_t kWireDepth = 2;
// A report per segment overlaps the next segment on the wire; 16 MiB keeps each report's work (a CRC32C and
// a write of 16 MiB) short against the wire's time for the next, and the first byte soon.
constexpr std::uint64_t kMaxStreamSegment = 16u << 20;
// A Chain hop forwards a segment only once it has landed on it, so each hop adds one segment's wire time to
// the chain's: segments of at most 1/64 of the range keep that fill under (hops - 1) / 64 of the
// point-to-point time (measured, 256 MiB over 1 Gbit/s links to 4 hops: 16 MiB segments made the chain
// 1.25x point-to-point).
constexpr std::uint64_t kChainSegmentsPerRange = 64;
using run::kVerifyRounds;

const char* landing_reason(const Error& e) {
  switch (e.code) {
    case ErrorCode::ResourceExhausted:
      return reason::kNoSpaceLeft;  // the only thing a landing runs out of is its file system's space
    case ErrorCode::PeerUnreachable:
      return reason::kPeerUnreachable;
    case ErrorCode::NotFound:
      return reason::kAccessLost;  // the grant was revoked or expired
    case ErrorCode::RemoteAccess:
    case ErrorCode::Forbidden:
      return run::reason_for(e.code);
    default:
      return reason::kTransportError;
  }
}

Failure landing_failure(const Error& e, const char* what) {
  return Failure{TransferState::Failed, landing_reason(e), std::string(what) + ": " + e.message};
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

std::optional<Failure> TransferRun::stream(const run::Context& c, std::size_t target) {
  const api::TransferTarget& t = request.wire.targets[target];
  const RemoteKey& grant = request.grants[target];
  Transport& transport = *transports[target];
  const bool verify = request.wire.verify == Verify::Crc32c;
  // Told what landed whenever the target's grant takes reports (grantId): verified or not, a Chain's next
  // hop forwards only that, and the final commit gives the target region its new version.
  const bool reports = !t.grant_id.empty();
  // Bytes an earlier transfer left in place: with verify they are read, checksummed and reported but not
  // sent (the target names any slice that differs, which is then sent); without, the caller vouches.
  const std::uint64_t resume = t.resume_offset;
  const bool check_prefix = verify && reports && resume > 0;
  const std::uint64_t segment = stream_segment(c, target);
  const SegmentFeed::Shape shape{.begin = check_prefix ? 0 : resume,
                                 .end = length,
                                 .segment = segment,
                                 .slice = verify ? request.wire.chunk_bytes : 0,
                                 .slots = kFeedSlots,
                                 .gate = request.follow ? follow_gate(c) : nullptr};
  if (shape.begin >= shape.end) return std::nullopt;  // everything was in place already

  // A file's read-ahead slots: counted against the memory cap while the transfer runs, and taken from the
  // region pool when an earlier transfer's are kept (faulting in 64 MiB anew cost up to 70 ms a transfer
  // on a machine whose memory was full of page cache). Declared before the feed, which registers them.
  RegionPtr slots;
  if (file) {
    auto made =
        c.regions.scratch(segment * kFeedSlots, "the read-ahead of source file \"" + file->name + "\"");
    if (!made) return Failure{TransferState::Failed, reason::kRegistrationFailed, made.error().message};
    slots = std::move(*made);
  }
  // A file the page cache does not hold is read around it, but for a Fanout: each target reads the file, and
  // through the page cache the disk is read once for all of them.
  const bool direct_reads = request.wire.targets.size() == 1;
  const auto registering = SteadyClock::now();
  auto opened = file ? SegmentFeed::over_file(file->fd.get(), request.wire.offset, direct_reads,
                                              slots->memory(), transport, {}, shape)
                     : SegmentFeed::over_memory(source->memory().bytes().subspan(request.wire.offset, length),
                                                source_path(&transport).registration(), shape);
  if (!opened) return Failure{TransferState::Failed, reason::kRegistrationFailed, opened.error().message};
  // A file's slots are registered here (a region source was registered when its path opened).
  if (file && c.metrics != nullptr)
    c.metrics->observe_registration(run::seconds(SteadyClock::now() - registering));
  SegmentFeed& feed = **opened;
  const auto began = SteadyClock::now();

  auto target_offset = [&](std::uint64_t range_offset) {
    return t.offset + (t.ring_bytes > 0 ? range_offset % t.ring_bytes : range_offset);
  };
  auto ops_for = [&](const SegmentFeed::Segment& s, std::uint64_t at, std::uint64_t n) {
    return std::vector<Op>{
        Op{OpKind::Write, s.local, s.local_offset + at, grant, target_offset(s.offset + at), n}};
  };
  auto progress_of = [&](const SegmentFeed::Segment& s, std::uint64_t at) {
    return [&, at](std::uint64_t done) { set_target_bytes(target, std::max(resume, s.offset + at + done)); };
  };
  // [at, +n) of segment s on the wire as one batch, waiting for it, retried as any segment is.
  auto put = [&](const SegmentFeed::Segment& s, std::uint64_t at, std::uint64_t n) {
    const auto sent = SteadyClock::now();
    auto f = send_segment(c, transport, ops_for(s, at, n), progress_of(s, at));
    add_stage(&StageSeconds::wire, run::seconds(SteadyClock::now() - sent));
    return f;
  };

  // The segments on the wire, oldest first. A batch whose submit failed has no id and is sent again,
  // synchronously, when its turn comes; one with nothing to send (a prefix already in place) has n == 0.
  struct Flight {
    const SegmentFeed::Segment* segment = nullptr;
    std::uint64_t at = 0;
    std::uint64_t n = 0;
    std::optional<BatchId> id;
    SteadyClock::time_point submitted;
  };
  std::deque<Flight> wire;
  // One wakeup for every segment on the wire: the watcher waits on the oldest, and any end may be it.
  const auto wakeup = std::make_shared<BatchWakeup>();
  const BatchOptions batch_options{request.wire.chunk_bytes, request.wire.window,
                                   BatchWakeup::notifier(wakeup)};
  auto wire_since = SteadyClock::now();  // the wire stage's time: while something is on it
  auto launch = [&](const SegmentFeed::Segment& s) {
    const std::uint64_t skip = s.offset < resume ? std::min(s.length, resume - s.offset) : 0;
    Flight f{&s, skip, s.length - skip, std::nullopt, SteadyClock::now()};
    if (wire.empty()) wire_since = SteadyClock::now();
    if (f.n > 0) {
      auto id = transport.submit(ops_for(s, f.at, f.n), batch_options);
      if (id) f.id = *id;
    }
    wire.push_back(f);
  };
  auto abandon_wire = [&] {
    for (const Flight& f : wire) {
      if (f.id) cancel_batch(c, transport, *f.id);
    }
    wire.clear();
  };
  // The oldest segment on the wire, once it is all at the target. A stop, or a re-send that gave up, sets
  // `failure`; a batch error that cannot be retried comes back as the error.
  std::optional<Failure> failure;
  auto complete_oldest = [&]() -> Result<const SegmentFeed::Segment*> {
    const Flight f = wire.front();
    bool again = f.n > 0 && !f.id;
    if (f.id) {
      std::optional<Error> error;
      if (auto stop = watch(c, transport, *f.id, *wakeup, progress_of(*f.segment, f.at), error)) {
        wire.pop_front();
        abandon_wire();
        failure = std::move(stop);
        return make_error(ErrorCode::Cancelled, failure->message);
      }
      if (error) {
        // As send_segment: a malformed op fails the same way again, and a timed-out batch already spent
        // the whole stall timeout without a byte.
        if (error->code == ErrorCode::InvalidArgument || error->code == ErrorCode::TimedOut) {
          wire.pop_front();
          abandon_wire();
          return *error;
        }
        again = true;
      }
    }
    if (f.id && !again && c.metrics != nullptr)
      c.metrics->observe_segment(run::seconds(SteadyClock::now() - f.submitted));
    if (again) {
      {
        std::lock_guard lock(mu);
        ++status.retries;
      }
      if (c.metrics != nullptr) c.metrics->slice_retried();
      if (auto fl =
              send_segment(c, transport, ops_for(*f.segment, f.at, f.n), progress_of(*f.segment, f.at))) {
        wire.pop_front();
        abandon_wire();
        failure = std::move(fl);
        return make_error(ErrorCode::Cancelled, failure->message);
      }
    }
    wire.pop_front();
    const auto now = SteadyClock::now();
    add_stage(&StageSeconds::wire, run::seconds(now - wire_since));
    wire_since = now;
    return f.segment;
  };

  // The report's answer and when it came: the land stage's own time is the report's round trip, not the
  // time this thread got round to reading the answer (it sends the next segment meanwhile).
  struct Answer {
    Result<api::Landed> landed;
    SteadyClock::time_point at;
  };
  struct Pending {
    const SegmentFeed::Segment* segment = nullptr;
    std::future<Answer> answer;
    SteadyClock::time_point sent;
    bool waits = false;  // sent with waitForPrevious
  };
  // A target that saves writes each segment to its file while answering its report: two reports in flight
  // keep its disk busy, the next segment's check and report overlapping the previous one's write
  // (stream/landing.h). Without a save a report is a check in memory, done long before the next segment;
  // one in flight leaves a file's read-ahead its slot.
  std::size_t report_depth = t.save ? 2 : 1;
  // The land stage's time: while a report is out (two overlapping count once).
  SteadyClock::time_point land_until{};
  // A report waits no longer than a batch may go without bytes: a target cut off is then noticed as soon
  // as the wire would notice it (a stop waits for the report in flight).
  api::ClientOptions report_options = c.peers;
  report_options.connect_timeout = std::min(report_options.connect_timeout, c.options.stall_timeout);
  report_options.read_timeout = std::min(report_options.read_timeout, c.options.stall_timeout);
  report_options.write_timeout = std::min(report_options.write_timeout, c.options.stall_timeout);
  // `after_another`: the report before this one is still out (the target waits for it, stream/landing.h).
  auto report = [&](const SegmentFeed::Segment& s, bool after_another) -> Result<Pending> {
    // In the grant's own offsets (a ring maps stream offsets itself): where the batch wrote them.
    api::LandedReport body{.offset = (t.ring_bytes > 0 ? 0 : t.offset) + s.offset,
                           .length = s.length,
                           .slice = shape.slice,
                           .crc32c = s.crc32c,
                           .wait_for_previous = after_another};
    // Taken before the report starts: it may be answered before the next statement runs.
    const auto sent = SteadyClock::now();
    try {
      return Pending{&s,
                     std::async(std::launch::async,
                                [&report_options, &t, body = std::move(body)] {
                                  auto landed =
                                      api::AgentClient(t.url, report_options).landed(t.grant_id, body);
                                  return Answer{std::move(landed), SteadyClock::now()};
                                }),
                     sent, after_another};
    } catch (const std::system_error& e) {
      return make_error(ErrorCode::ResourceExhausted,
                        std::string("cannot start a landing report: ") + e.what());
    }
  };
  // The segment's bytes are where they belong (verified, saved): record it and free its slot.
  auto landed = [&](const SegmentFeed::Segment& s) -> std::optional<Failure> {
    // Read before the slot is given back: the producer refills it at once.
    const std::uint64_t end = s.offset + s.length;
    {
      std::lock_guard lock(mu);
      status.targets[target].committed_bytes = end;
    }
    feed.give_back();
    if (request.wire.max_bytes_per_second > 0) {
      const auto due =
          began + std::chrono::duration_cast<SteadyClock::duration>(
                      std::chrono::duration<double>(static_cast<double>(end - shape.begin) /
                                                    static_cast<double>(request.wire.max_bytes_per_second)));
      return pause(due - SteadyClock::now());
    }
    return std::nullopt;
  };
  // The answer to report p. A target agent from before waitForPrevious refuses the field as unknown (400,
  // a node not yet upgraded): it gets one report at a time from then on, and this one again without it
  // (the report before it is settled by now).
  auto answer_of = [&](Pending& p) -> Answer {
    Answer a = p.answer.get();
    if (a.landed || !p.waits || a.landed.error().code != ErrorCode::InvalidArgument ||
        a.landed.error().message.find("waitForPrevious") == std::string::npos)
      return a;
    if (report_depth > 1) {
      log::warn(
          "the target agent does not take waitForPrevious (an older version): one landing report at a time",
          {{"transfer", status.id}, {"target", std::to_string(target)}});
    }
    report_depth = 1;
    auto again = report(*p.segment, false);
    if (!again) return Answer{again.error(), SteadyClock::now()};
    p = std::move(*again);
    return p.answer.get();
  };
  auto settle = [&](Pending& p) -> std::optional<Failure> {
    const SegmentFeed::Segment& s = *p.segment;
    for (int round = 0;; ++round) {
      // The report's own timeout bounds this; a stop waits it out, since it reads the slot's bytes' CRCs.
      auto [answer, at] = answer_of(p);
      if (at > land_until) add_stage(&StageSeconds::land, run::seconds(at - std::max(p.sent, land_until)));
      land_until = std::max(land_until, at);
      if (!answer) return landing_failure(answer.error(), "reporting landed bytes to the target agent");
      if (answer->mismatched.empty()) break;
      const std::uint64_t slices = (s.length - 1) / shape.slice + 1;
      if (round == kVerifyRounds) {
        return Failure{TransferState::Failed, reason::kChecksumMismatch,
                       std::to_string(answer->mismatched.size()) + " of " + std::to_string(slices) +
                           " slices of the segment at byte offset " + std::to_string(s.offset) +
                           " differ at the target after " + std::to_string(kVerifyRounds) + " re-sends"};
      }
      {
        std::lock_guard lock(mu);
        status.slices_resent += static_cast<std::uint32_t>(answer->mismatched.size());
      }
      log::warn("re-sending mismatching slices", {{"transfer", status.id},
                                                  {"target", std::to_string(target)},
                                                  {"offset", std::to_string(s.offset)},
                                                  {"slices", std::to_string(answer->mismatched.size())}});
      for (const std::uint64_t i : answer->mismatched) {
        if (i >= slices) {
          return Failure{TransferState::Failed, reason::kTransportError,
                         "the target agent named slice " + std::to_string(i) + " of a " +
                             std::to_string(slices) + "-slice segment"};
        }
        const std::uint64_t at = i * shape.slice;
        if (auto f = put(s, at, std::min(shape.slice, s.length - at))) return f;
      }
      auto again = report(s, false);
      if (!again) return landing_failure(again.error(), "reporting re-sent bytes");
      p = std::move(*again);
    }
    return landed(s);
  };

  // The read stage's time, and a file's bytes by where they were read from.
  auto account_read = [&] {
    add_stage(&StageSeconds::read, feed.busy_seconds());
    if (!file || c.metrics == nullptr) return;
    const auto bytes = feed.file_bytes();
    c.metrics->add_file_read("page_cache", static_cast<double>(bytes.cached));
    c.metrics->add_file_read("direct", static_cast<double>(bytes.direct));
  };
  // The reports in flight, oldest first, settled in order.
  std::deque<Pending> pending;
  // Every early return leaves nothing on the wire and no report running against a slot the feed may free.
  auto drain = [&](std::optional<Failure> f) {
    abandon_wire();
    for (Pending& p : pending) {
      if (p.answer.valid()) p.answer.wait();
    }
    pending.clear();
    account_read();
    return f;
  };
  auto settle_oldest = [&] {
    auto f = settle(pending.front());
    pending.pop_front();
    return f;
  };
  for (;;) {
    if (auto f = stopped()) return drain(f);
    while (wire.size() < kWireDepth) {
      auto next = feed.next(wire.empty() ? 20ms : 0ms);
      if (!next) {
        if (auto f = stopped()) return drain(f);  // a forwarding feed gives up when the run stops
        const ErrorCode code = next.error().code;
        const char* why = code == ErrorCode::Conflict ? reason::kSourceFileChanged
                          : code == ErrorCode::NotFound || code == ErrorCode::TimedOut
                              ? reason::kUpstreamLost
                              : reason::kTransportError;
        return drain(Failure{TransferState::Failed, why, next.error().message});
      }
      if (*next == nullptr) break;
      launch(**next);
    }
    if (wire.empty()) {
      if (feed.done()) break;
      continue;
    }
    failure.reset();
    auto done = complete_oldest();
    if (!done) {
      // A stop or a retry that gave up said why in `failure`; a batch error says it here.
      return drain(
          failure ? failure
                  : Failure{TransferState::Failed, run::reason_for(done.error().code), done.error().message});
    }
    const SegmentFeed::Segment& s = **done;
    while (pending.size() >= report_depth) {
      if (auto f = settle_oldest()) return drain(f);
    }
    if (!reports) {
      if (auto f = landed(s)) return drain(f);
      continue;
    }
    auto sent = report(s, !pending.empty());
    if (!sent) return drain(landing_failure(sent.error(), "reporting landed bytes to the target agent"));
    pending.push_back(std::move(*sent));
  }
  while (!pending.empty()) {
    if (auto f = settle_oldest()) return drain(f);
  }
  account_read();
  if (file) {
    if (auto same = file->unchanged(); !same)
      return Failure{TransferState::Failed, reason::kSourceFileChanged, same.error().message};
  }
  if (reports) {
    // Every byte reported landed (and verified): the target saves its file in place, and its region gets
    // a new version; never before this point, so a failed or partial write bumps nothing.
    const auto committing = SteadyClock::now();
    auto committed = api::AgentClient(t.url, c.peers).commit(t.grant_id, t.save ? length : t.offset + length);
    add_stage(&StageSeconds::commit, run::seconds(SteadyClock::now() - committing));
    if (!committed)
      return landing_failure(committed.error(),
                             t.save ? "committing the target's file" : "committing the target's write");
  }
  return std::nullopt;
}

}  // namespace conduit::agent
