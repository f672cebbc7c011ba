// A region's acknowledgements (region_acks.h): a reader says which version it applied, a publisher reads the
// acks or waits (a long-poll) until enough readers applied version K. Access as the version route's: the
// controller, operators and local processes with the agent's token; a tenant's controller on the regions its
// namespace may read.
#include <string>

#include "conduit/api/errors.h"
#include "conduit/api/wire.h"
#include "conduit/common/time.h"
#include "rest/long_poll.h"
#include "rest/reply.h"
#include "rest/requests.h"
#include "rest/routes.h"

namespace conduit::agent::rest {
namespace {

constexpr const char* kRegionAcks = "/v1/regions/{name}/acks";

api::Acks answer(const std::string& region, std::uint64_t version,
                 const std::vector<RegionAcks::Entry>& acked, bool done) {
  api::Acks out{.region = region, .version = version, .readers = {}, .done = done};
  for (const auto& e : acked) {
    out.readers.push_back({e.reader, e.version, format_rfc3339(e.at, TimePrecision::Millis)});
  }
  return out;
}

// Records the reader's ack; a version the region has not reached yet is refused (409) and nothing changes.
void post_ack(Call& c) {
  const auto ack = c.body(api::Ack::from_json);
  if (!ack) return;
  const auto region = c.region();
  if (!region) return;
  // Versions only grow, so one at most the current now stays so.
  const std::uint64_t current = (*region)->update().version;
  if (ack->version > current) {
    return send_error(c.res, 409, api::wire_code(ErrorCode::Conflict),
                      "version " + std::to_string(ack->version) + " of region " + c.name +
                          " is past its current version " + std::to_string(current) +
                          ": a reader acks a version it applied");
  }
  RegionAcks& acks = (*region)->acks();
  if (auto recorded = acks.record(ack->reader, ack->version); !recorded) {
    return c.fail(make_error(recorded.error().code, "region " + c.name + ": " + recorded.error().message));
  }
  c.reply(200, answer(c.name, ack->version, acks.list(), /*done=*/true).to_json());
}

// The acks at once; with timeoutSeconds, once `readers` readers acked a version >= `version` (woken by each
// ack), or when the time is up with the acks as they are.
void get_acks(Call& c) {
  const auto query = parse_acks_query(c.req.params);
  if (!query) return c.fail(query.error());
  const auto region = c.region();
  if (!region) return;
  const RegionAcks& acks = (*region)->acks();
  auto acked = acks.list();
  if (!acks.done(query->version, query->readers) && query->timeout.count() > 0) {
    auto waited = long_poll(c.state, query->timeout, [&](std::chrono::seconds limit) {
      return acks.wait_done(query->version, query->readers, limit,
                            [&state = c.state] { return !state.ready.load(); });
    });
    if (!waited) return busy(c.res);
    acked = std::move(*waited);
  }
  std::uint64_t applied = 0;
  for (const auto& e : acked) applied += e.version >= query->version ? 1 : 0;
  c.reply(200, answer(c.name, query->version, acked, applied >= query->readers).to_json());
}

}  // namespace

void install_ack_routes(Router& r) {
  r.post(kRegionAcks, post_ack);
  r.get(kRegionAcks, get_acks, RouteAccess::Control, {"version", "readers", "timeoutSeconds"});
}

}  // namespace conduit::agent::rest
