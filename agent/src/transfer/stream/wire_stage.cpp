#include "transfer/stream/wire_stage.h"

#include <algorithm>

namespace conduit::agent {

using run::Failure;
using run::SteadyClock;

WireStage::WireStage(Run& run, Transport& transport, Placement placement, std::uint64_t slice_bytes,
                     std::uint32_t window)
    : run_(run),
      transport_(transport),
      placement_(placement),
      wakeup_(std::make_shared<BatchWakeup>()),
      batch_options_(slice_bytes, window, BatchWakeup::notifier(wakeup_)),
      busy_since_(SteadyClock::now()) {}

std::vector<Op> WireStage::ops_for(const Segment& s, std::uint64_t at, std::uint64_t n) const {
  const std::uint64_t from = s.offset + at;
  const std::uint64_t to =
      placement_.offset + (placement_.ring_bytes > 0 ? from % placement_.ring_bytes : from);
  return std::vector<Op>{Op{OpKind::Write, s.local, s.local_offset + at, placement_.grant, to, n}};
}

WireStage::Progress WireStage::progress_of(const Segment& s, std::uint64_t at) {
  const std::uint64_t from = s.offset + at;
  return [this, from](std::uint64_t done) { run_.reached(std::max(placement_.resume, from + done)); };
}

void WireStage::launch(const Segment& s) {
  const std::uint64_t resume = placement_.resume;
  const std::uint64_t skip = s.offset < resume ? std::min(s.length, resume - s.offset) : 0;
  Flight f{&s, skip, s.length - skip, std::nullopt, SteadyClock::now()};
  if (flights_.empty()) busy_since_ = SteadyClock::now();
  if (f.n > 0) {
    auto id = transport_.submit(ops_for(s, f.at, f.n), batch_options_);
    if (id) f.id = *id;
  }
  flights_.push_back(f);
}

void WireStage::abandon() {
  for (const Flight& f : flights_) {
    if (f.id) run_.cancel(*f.id);
  }
  flights_.clear();
}

WireStage::Completed WireStage::end(Failure failure) {
  flights_.pop_front();
  abandon();
  return Completed{nullptr, std::move(failure)};
}

WireStage::Completed WireStage::complete_oldest() {
  const Flight f = flights_.front();
  bool again = f.n > 0 && !f.id;
  if (f.id) {
    std::optional<Error> error;
    if (auto stop = run_.watch(*f.id, *wakeup_, progress_of(*f.segment, f.at), error))
      return end(std::move(*stop));
    if (error) {
      // As a segment sent on its own: a malformed op fails the same way again, and a timed-out batch already
      // spent the whole stall timeout without a byte.
      if (error->code == ErrorCode::InvalidArgument || error->code == ErrorCode::TimedOut)
        return end(Failure{TransferState::Failed, run::reason_for(error->code), error->message});
      again = true;
    }
  }
  if (f.id && !again) run_.segment_sent(run::seconds(SteadyClock::now() - f.submitted));
  if (again) {
    run_.retried();
    if (auto failed = run_.send(ops_for(*f.segment, f.at, f.n), progress_of(*f.segment, f.at)))
      return end(std::move(*failed));
  }
  flights_.pop_front();
  const auto now = SteadyClock::now();
  run_.wire_busy(run::seconds(now - busy_since_));
  busy_since_ = now;
  return Completed{f.segment, std::nullopt};
}

std::optional<Failure> WireStage::resend(const Segment& s, std::uint64_t at, std::uint64_t n) {
  const auto sent = SteadyClock::now();
  auto failed = run_.send(ops_for(s, at, n), progress_of(s, at));
  run_.wire_busy(run::seconds(SteadyClock::now() - sent));
  return failed;
}

}  // namespace conduit::agent
