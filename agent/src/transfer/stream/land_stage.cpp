#include "transfer/stream/land_stage.h"

#include <algorithm>
#include <system_error>
#include <utility>

namespace conduit::agent {

using run::Failure;
using run::SteadyClock;

namespace {

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

}  // namespace

Failure landing_failure(const Error& e, const char* what) {
  return Failure{TransferState::Failed, landing_reason(e), std::string(what) + ": " + e.message};
}

LandStage::LandStage(Run& run, Resend& wire, Target* target, Shape shape, log::Fields who)
    : run_(run), wire_(wire), target_(target), shape_(shape), who_(std::move(who)) {}

Result<LandStage::Pending> LandStage::report(const Segment& s, bool after_another) {
  api::LandedReport body{.offset = shape_.grant_offset + s.offset,
                         .length = s.length,
                         .slice = shape_.slice,
                         .crc32c = s.crc32c,
                         .wait_for_previous = after_another};
  // Taken before the report starts: it may be answered before the next statement runs.
  const auto sent = SteadyClock::now();
  try {
    return Pending{&s,
                   std::async(std::launch::async,
                              [target = target_, body = std::move(body)] {
                                auto landed = target->landed(body);
                                return Answer{std::move(landed), SteadyClock::now()};
                              }),
                   sent, after_another};
  } catch (const std::system_error& e) {
    return make_error(ErrorCode::ResourceExhausted,
                      std::string("cannot start a landing report: ") + e.what());
  }
}

// A target agent from before waitForPrevious refuses the field as unknown (400, a node not yet upgraded):
// it gets one report at a time from then on, and this one again without it (the report before it is
// settled by now).
LandStage::Answer LandStage::answer_of(Pending& p) {
  Answer a = p.answer.get();
  if (a.landed || !p.waits || a.landed.error().code != ErrorCode::InvalidArgument ||
      a.landed.error().message.find("waitForPrevious") == std::string::npos)
    return a;
  if (shape_.depth > 1) {
    log::warn(
        "the target agent does not take waitForPrevious (an older version): one landing report at a time",
        who_);
  }
  shape_.depth = 1;
  auto again = report(*p.segment, false);
  if (!again) return Answer{again.error(), SteadyClock::now()};
  p = std::move(*again);
  return p.answer.get();
}

std::optional<Failure> LandStage::settle(Pending& p) {
  const Segment& s = *p.segment;
  for (int round = 0;; ++round) {
    // The report's own timeout bounds this; a stop waits it out, since it reads the slot's bytes' CRCs.
    auto [answer, at] = answer_of(p);
    if (at > busy_until_) run_.land_busy(run::seconds(at - std::max(p.sent, busy_until_)));
    busy_until_ = std::max(busy_until_, at);
    if (!answer) return landing_failure(answer.error(), "reporting landed bytes to the target agent");
    if (answer->mismatched.empty()) break;
    const std::uint64_t slices = (s.length - 1) / shape_.slice + 1;
    if (round == run::kVerifyRounds) {
      return Failure{TransferState::Failed, reason::kChecksumMismatch,
                     std::to_string(answer->mismatched.size()) + " of " + std::to_string(slices) +
                         " slices of the segment at byte offset " + std::to_string(s.offset) +
                         " differ at the target after " + std::to_string(run::kVerifyRounds) + " re-sends"};
    }
    run_.slices_resent(answer->mismatched.size());
    log::Fields fields = who_;
    fields.emplace_back("offset", std::to_string(s.offset));
    fields.emplace_back("slices", std::to_string(answer->mismatched.size()));
    log::warn("re-sending mismatching slices", fields);
    for (const std::uint64_t i : answer->mismatched) {
      if (i >= slices) {
        return Failure{TransferState::Failed, reason::kTransportError,
                       "the target agent named slice " + std::to_string(i) + " of a " +
                           std::to_string(slices) + "-slice segment"};
      }
      const std::uint64_t at = i * shape_.slice;
      if (auto f = wire_.resend(s, at, std::min(shape_.slice, s.length - at))) return f;
    }
    auto again = report(s, false);
    if (!again) return landing_failure(again.error(), "reporting re-sent bytes");
    p = std::move(*again);
  }
  // Read before the run gives the slot back: the producer refills it at once.
  return run_.landed(s.offset + s.length);
}

std::optional<Failure> LandStage::settle_oldest() {
  auto f = settle(pending_.front());
  pending_.pop_front();
  return f;
}

std::optional<Failure> LandStage::take(const Segment& s) {
  while (pending_.size() >= shape_.depth) {
    if (auto f = settle_oldest()) return f;
  }
  if (target_ == nullptr) return run_.landed(s.offset + s.length);
  auto sent = report(s, !pending_.empty());
  if (!sent) return landing_failure(sent.error(), "reporting landed bytes to the target agent");
  pending_.push_back(std::move(*sent));
  return std::nullopt;
}

std::optional<Failure> LandStage::finish() {
  while (!pending_.empty()) {
    if (auto f = settle_oldest()) return f;
  }
  return std::nullopt;
}

void LandStage::abandon() {
  for (Pending& p : pending_) {
    if (p.answer.valid()) p.answer.wait();
  }
  pending_.clear();
}

TargetAgent::TargetAgent(std::string url, std::string grant_id, const api::ClientOptions& peers,
                         std::chrono::milliseconds stall_timeout)
    : url_(std::move(url)), grant_id_(std::move(grant_id)), options_(peers) {
  options_.connect_timeout = std::min(options_.connect_timeout, stall_timeout);
  options_.read_timeout = std::min(options_.read_timeout, stall_timeout);
  options_.write_timeout = std::min(options_.write_timeout, stall_timeout);
}

Result<api::Landed> TargetAgent::landed(const api::LandedReport& report) {
  return api::AgentClient(url_, options_).landed(grant_id_, report);
}

}  // namespace conduit::agent
