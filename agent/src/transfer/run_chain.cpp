// Chain (docs/broadcast.md): source -> hop 0 -> hop 1 -> ... Every hop is in flight at once. This agent
// streams hop 0 itself; hop k >= 1 is fed by a forwarding transfer on hop k-1's agent, which reads each
// segment of its own region only once that segment was reported landed there (and verified, with crc32c)
// and writes it on to hop k (source.followGrant), so N hops cost about one link's time plus N-1 segments.
// This thread watches that transfer and mirrors its progress into hop k's status. When the feeder stops
// answering (its agent died, its link was cut) or loses what fed it, hop k is fed by the hop before that,
// from what hop k already has, and finally by this agent: the rest of the chain goes on.
#include <thread>

#include "conduit/common/log.h"
#include "transfer/chain_hop.h"
#include "transfer/run.h"

namespace conduit::agent {

using run::Failure;
using run::SteadyClock;
using namespace std::chrono_literals;

namespace {

constexpr auto kWatchInterval = 50ms;

bool unreachable(const Error& e) { return e.code == ErrorCode::PeerUnreachable; }

}  // namespace

api::TransferRequest hop_request(const api::TransferRequest& chain, std::size_t feeder, std::size_t hop,
                                 std::uint64_t length, std::uint64_t committed, std::uint64_t deadline_left) {
  api::TransferRequest ask = chain;
  const api::TransferTarget& from = chain.targets.at(feeder);
  ask.source_region = from.region;
  ask.source_file.clear();
  ask.offset = 0;
  ask.length = length;
  ask.follow_grant = from.grant_id;
  ask.chain = false;
  ask.targets = {chain.targets.at(hop)};
  ask.targets[0].resume_offset = committed;
  ask.targets[0].release_grant = false;
  ask.deadline_seconds = deadline_left;
  ask.ns.clear();
  ask.source_pod.clear();
  return ask;
}

std::optional<Failure> TransferRun::forward(const run::Context& c, std::size_t k) {
  const api::TransferTarget& t = request.wire.targets[k];
  // What hop k holds: a new feeder starts there (a hop that saves a file starts its file at 0).
  std::uint64_t committed = t.save ? 0 : t.resume_offset;
  // A feeder that does not answer for this long is taken for dead: its forwarding stops with it.
  const auto patience = std::min<SteadyClock::duration>(c.options.stall_timeout, 2s);
  for (std::size_t feeder = k; feeder-- > 0;) {
    if (auto f = stopped()) return f;
    const api::TransferTarget& from = request.wire.targets[feeder];
    // Every call to the feeder waits at most `patience`: behind a cut link a call hangs until it times out.
    api::ClientOptions quick = c.peers;
    quick.connect_timeout = quick.read_timeout = quick.write_timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(patience);
    api::AgentClient hop(from.url, quick, "hop " + std::to_string(feeder) + " (" + from.url + ")");
    std::uint64_t deadline_left = 0;
    if (request.wire.deadline_seconds > 0) {
      const auto left = created + std::chrono::seconds(request.wire.deadline_seconds) - SteadyClock::now();
      deadline_left = static_cast<std::uint64_t>(
          std::max<std::int64_t>(1, std::chrono::ceil<std::chrono::seconds>(left).count()));
    }
    const api::TransferRequest ask = hop_request(request.wire, feeder, k, length, committed, deadline_left);
    auto started = hop.start_transfer(ask);
    if (!started) {
      if (!unreachable(started.error())) {
        return Failure{TransferState::Failed, reason::kTransportError,
                       "asking hop " + std::to_string(feeder) + " to forward to hop " + std::to_string(k) +
                           ": " + started.error().message};
      }
      log::warn("chain hop does not answer: routing around it", {{"transfer", status.id},
                                                                 {"hop", std::to_string(feeder)},
                                                                 {"feeding", std::to_string(k)},
                                                                 {"error", started.error().message}});
      continue;
    }
    const std::string id = started->id;
    bool route_around = false;
    auto silent_since = SteadyClock::now();
    for (;;) {
      if (auto f = stopped()) {
        (void)hop.cancel_transfer(id);
        return f;
      }
      std::this_thread::sleep_for(kWatchInterval);
      auto s = hop.get_transfer(id);
      const auto now = SteadyClock::now();
      if (!s) {
        if (!unreachable(s.error()) || now - silent_since < patience) continue;
        log::warn("chain hop stopped answering: routing around it", {{"transfer", status.id},
                                                                     {"hop", std::to_string(feeder)},
                                                                     {"feeding", std::to_string(k)},
                                                                     {"error", s.error().message}});
        route_around = true;
        break;
      }
      silent_since = now;
      if (!s->targets.empty()) {
        const auto& mirrored = s->targets.front();
        committed = std::max(committed, mirrored.committed_bytes);
        set_target_bytes(k, std::max(committed, mirrored.bytes_done));
        std::lock_guard lock(mu);
        status.targets[k].committed_bytes = committed;
      }
      if (!s->finished()) continue;
      if (s->state == "Succeeded") return std::nullopt;
      if (s->reason == reason::kUpstreamLost) {
        // The feeder itself lost what fed it: the hop before it may still have the bytes.
        log::warn("chain hop lost its upstream: routing around it", {{"transfer", status.id},
                                                                     {"hop", std::to_string(feeder)},
                                                                     {"feeding", std::to_string(k)},
                                                                     {"error", s->message}});
        route_around = true;
        break;
      }
      const char* why = reason::kTransportError;  // the hop's reason, as one of ours
      for (const char* r : reason::kAll) {
        if (s->reason == r) why = r;
      }
      return Failure{
          TransferState::Failed, why,
          "hop " + std::to_string(feeder) + " forwarding to hop " + std::to_string(k) + ": " + s->message};
    }
    if (route_around) {
      // Not cancelled: it finished (UpstreamLost), or its agent does not answer. Alive behind a cut link, it
      // forwards only bytes that landed verified on its own region (the same bytes) and stops with
      // UpstreamLost once nothing more lands there.
      std::lock_guard lock(mu);
      ++status.retries;
    }
  }
  // No hop before k answers: this agent feeds it, from what it already has.
  request.wire.targets[k].resume_offset = committed;
  log::info("chain hop fed by the source",
            {{"transfer", status.id}, {"hop", std::to_string(k)}, {"from", std::to_string(committed)}});
  return stream(c, k);
}

}  // namespace conduit::agent
