// Transfers this agent runs as the source: asked for (and, with ?waitSeconds, waited on to their end),
// listed, looked at (a long-poll for the end) and cancelled.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "rest/access.h"
#include "rest/long_poll.h"
#include "rest/peer_access.h"
#include "rest/reply.h"
#include "rest/requests.h"
#include "rest/routes.h"
#include "tenancy.h"

namespace conduit::agent::rest {
namespace {

using json = nlohmann::json;

constexpr const char* kTransfer = "/v1/transfers/{id}";

// What an agent's transfer request touches of its source region, as its grants there must allow: each
// scatter op's range, or the one range (to the region's end when its length is 0). Sending the range out
// reads it, op "read" writes into it. A region that is not there passes: the transfer fails to start with
// NotFound as for anyone.
std::optional<std::string> reach_refusal(const Caller& caller, const AgentState& state,
                                         const ResolvedRequest& request) {
  const Reach reach = request.wire.op == OpKind::Read ? Reach::Write : Reach::Read;
  const std::string& name = request.wire.source_region;
  const auto now = std::chrono::system_clock::now();
  // One look at the grants for all the ops (up to kMaxScatterOps), not a copy of the table per op.
  const auto grants = state.grants.list();
  for (const ScatterOp& op : request.wire.ops) {
    // A strided op's whole extent, first run to last (gaps included: stricter, never looser), clamped to
    // 2^64 here; whether it fits the region is start_scatter's to say.
    const unsigned __int128 extent =
        static_cast<unsigned __int128>(op.count - 1) * op.source_stride + op.length;
    const std::uint64_t length =
        static_cast<std::uint64_t>(std::min<unsigned __int128>(extent, UINT64_MAX - op.source_offset));
    if (auto why = peer_refusal(grants, caller, name, reach, op.source_offset, length, now)) return why;
  }
  if (!request.wire.ops.empty()) return std::nullopt;
  std::uint64_t length = request.wire.length;
  if (length == 0) {
    auto region = state.regions.get(name);
    if (!region) return std::nullopt;
    length = (*region)->bytes() > request.wire.offset ? (*region)->bytes() - request.wire.offset : 0;
  }
  return peer_refusal(grants, caller, name, reach, request.wire.offset, length, now);
}

// Why `caller` may not ask for `request`, or nullopt. The agent checks again what the controller checked: a
// job reaches only the source region and file its namespace (and pod) may. An agent resuming a chain asks a
// hop to send on what it wrote there: only a region, and only the ranges its grants there allow, as they
// allow; revoking grants at other agents in this agent's name is for the controller and operators.
std::optional<std::string> transfer_refusal(const Caller& caller, const AgentState& state,
                                            const ResolvedRequest& request) {
  if (!request.wire.source_region.empty()) {
    if (auto source = state.regions.get(request.wire.source_region)) {
      if (auto why = refusal(**source, request.wire.ns, request.wire.source_pod)) return why;
    }
  }
  if (!request.wire.source_file.empty()) {
    if (auto why = file_refusal(request.wire.source_file, request.wire.ns, state.config.namespace_files)) {
      return why;
    }
  }
  if (caller.role != Role::Agent) return std::nullopt;
  if (request.wire.source_region.empty() ||
      !may_touch_region(caller, state.grants, request.wire.source_region)) {
    return "an agent sends on only a region a grant on which is made for it";
  }
  if (auto why = reach_refusal(caller, state, request)) return why;
  for (const api::TransferTarget& t : request.wire.targets) {
    if (t.release_grant) return "an agent may not ask for releaseGrant";
  }
  return std::nullopt;
}

// What a Chain hop forwards from: its own write grant on the source region, covering the range, whose
// landing reports say how far the bytes have arrived. The transfer holds the grant's Landing, not the
// grant, so revoking the grant still deregisters its key at once; the forwarder then sees it gone.
Result<ResolvedRequest::Follow> follow_of(const GrantTable& grants, const ResolvedRequest& request) {
  const std::string& id = request.wire.follow_grant;
  auto grant = grants.get(id);
  if (!grant) return make_error(ErrorCode::NotFound, "source.followGrant: " + grant.error().message);
  const Grant& g = **grant;
  if (g.access != Access::RemoteWrite || !g.landing || g.landing->ring()) {
    return make_error(ErrorCode::InvalidArgument, "source.followGrant: grant " + id +
                                                      " is not a write grant of host memory that takes "
                                                      "landing reports into a region");
  }
  if (g.region->name() != request.wire.source_region || g.offset != 0 || request.wire.offset != 0) {
    return make_error(ErrorCode::InvalidArgument, "source.followGrant: grant " + id + " writes region \"" +
                                                      g.region->name() + "\" from offset " +
                                                      std::to_string(g.offset) + ", not source region \"" +
                                                      request.wire.source_region + "\" from offset 0");
  }
  if (request.wire.length > g.length) {
    return make_error(ErrorCode::InvalidArgument, "source.followGrant: grant " + id + " covers " +
                                                      std::to_string(g.length) + " bytes, fewer than the " +
                                                      std::to_string(request.wire.length) + " to forward");
  }
  return ResolvedRequest::Follow{g.landing, [&grants, id] { return grants.get(id).ok(); }};
}

struct Admitted {
  ResolvedRequest request;
  std::chrono::seconds wait{0};  // ?waitSeconds
};

// A transfer request checked once, here, before any work: the query and the body read as a request
// (ResolvedRequest::from_json: shape and values), whether this caller may ask for it (the namespace it
// names, then transfer_refusal), who asked, and the grant a Chain hop follows resolved. nullopt after
// answering. TransferManager::start then checks it against what only the run knows: the source's size and
// memory, the targets' transports and grants.
std::optional<Admitted> admit_transfer(const Call& c) {
  const auto wait = parse_seconds_query(c.req.params, "waitSeconds");
  if (!wait) {
    c.fail(wait.error());
    return std::nullopt;
  }
  auto request = c.body(ResolvedRequest::from_json);
  if (!request) return std::nullopt;
  if (c.out_of_scope(request->wire.ns)) return std::nullopt;
  if (c.denied(transfer_refusal(c.caller, c.state, *request))) return std::nullopt;
  // An agent or a tenant's controller then sees and cancels only what it asked for (may_see_transfer).
  if (c.caller.role == Role::Agent || c.caller.tenant_controller())
    request->requested_by = c.caller.describe();
  if (!request->wire.follow_grant.empty()) {
    auto follow = follow_of(c.state.grants, *request);
    if (!follow) {
      c.fail(follow.error());
      return std::nullopt;
    }
    request->follow = std::move(*follow);
  }
  return Admitted{std::move(*request), *wait};
}

// With ?waitSeconds, the answer is the end when it comes in time (200): one round trip from submit to
// completion. Otherwise, or once the wait is up or when no long-poll slot is free, 202 with the status so
// far.
void start_transfer(Call& c) {
  auto admitted = admit_transfer(c);
  if (!admitted) return;
  auto id = c.state.transfers.start(std::move(admitted->request));
  if (!id) return c.fail_file(id.error());  // a source file opened beneath its namespace
  c.res.set_header("Location", "/v1/transfers/" + *id);
  const bool asked_to_wait = admitted->wait.count() > 0;
  std::optional<Result<TransferStatus>> waited;
  if (asked_to_wait) {
    waited = long_poll(c.state, admitted->wait,
                       [&](std::chrono::seconds limit) { return c.state.transfers.wait(*id, limit); });
  }
  const auto status = waited ? *waited : c.state.transfers.get(*id);
  json answer = status ? status->to_api().to_json() : json::object();
  answer["id"] = *id;
  c.reply(asked_to_wait && status && ended(status->state) ? 200 : 202, answer);
}

void list_transfers(Call& c) {
  json list = json::array();
  for (const auto& status : c.state.transfers.list()) {
    if (may_see_transfer(c.caller, status)) list.push_back(status.to_api().to_json());
  }
  c.reply(200, items(std::move(list)));
}

// Why the caller may not look at or cancel transfer {id} (`only` says what it may), or nullopt.
std::optional<std::string> path_transfer_refusal(const Call& c, const char* only) {
  if (!may_see_transfer(c.caller, c.state.transfers, c.id)) return std::string(only);
  return transfer_namespace_refusal(c.state.transfers, c.id, c.ns);
}

// A long-poll for the transfer's end with ?waitSeconds; 429 when no slot is free.
void get_transfer(Call& c) {
  const auto wait = parse_seconds_query(c.req.params, "waitSeconds", /*namespace_too=*/true);
  if (!wait) return c.fail(wait.error());
  if (c.denied(path_transfer_refusal(c, "it sees only the transfers it asked for"))) return;
  std::optional<Result<TransferStatus>> status;
  if (wait->count() > 0) {
    status = long_poll(c.state, *wait,
                       [&](std::chrono::seconds limit) { return c.state.transfers.wait(c.id, limit); });
    if (!status) return busy(c.res);
  } else {
    status = c.state.transfers.get(c.id);
  }
  if (!*status) return c.fail(status->error());
  c.reply(200, (*status)->to_api().to_json());
}

void cancel_transfer(Call& c) {
  if (c.denied(path_transfer_refusal(c, "it cancels only the transfers it asked for"))) return;
  if (auto cancelled = c.state.transfers.cancel(c.id); !cancelled) return c.fail(cancelled.error());
  auto status = c.state.transfers.get(c.id);
  if (!status) return c.fail(status.error());
  c.reply(202, status->to_api().to_json());
}

}  // namespace

void install_transfer_routes(Router& r) {
  r.post("/v1/transfers", start_transfer, RouteAccess::Peer, {"waitSeconds"});
  r.get("/v1/transfers", list_transfers);
  r.get(kTransfer, get_transfer, RouteAccess::Peer, {"waitSeconds", "namespace"});
  r.del(kTransfer, cancel_transfer, RouteAccess::Peer, {"namespace"});
}

}  // namespace conduit::agent::rest
