// Reshard plans (docs/reshard.md): manifests in, the plan out, from the agent's cache when the same
// manifests were planned before. Pure computation: the route reads no region, grant or transfer.
//
// Access: Control, the least that lets in both of its callers: the controller (a tenant's one too), which
// plans a TransferJob's reshard, and a tenant's process with the SDK, which holds the agent's token (an
// operator). Agents are left out: no transfer between two of them needs a plan, and a route open to every
// node's certificate would let any of them spend this agent's CPU and memory on planning.
#include "conduit/api/reshard_wire.h"
#include "rest/body.h"
#include "rest/reply.h"
#include "rest/routes.h"

namespace conduit::agent::rest {
namespace {

void plan_reshard(Call& c) {
  const auto body = read_json_body(body_limit(c.state.config.max_body_bytes, c.req), c.req, c.res);
  if (!body) return;
  const auto request = api::ReshardPlanRequest::from_json(*body);
  if (!request) return c.fail(request.error());
  const auto planned = c.state.reshard_plans.plan(request->sources, request->targets);
  if (!planned) return c.fail(planned.error());
  c.reply(200, api::reshard_plan_to_json(*planned->plan, planned->cached));
}

}  // namespace

void install_reshard_routes(Router& r) { r.post(std::string(kReshardPlansPath), plan_reshard); }

}  // namespace conduit::agent::rest
