// Who calls (rest/identity.h), decided before routing so a route added later cannot forget it: a verified
// client certificate that names an identity, else the bearer token of --token-file, which names the operator.
// /healthz, /readyz and /metrics need neither; everything else does, known route or not, so an
// unauthenticated caller learns nothing about which routes exist.
#pragma once

#include <httplib.h>

#include "rest/identity.h"
#include "rest/rest.h"

namespace conduit::agent::rest {

// Names the caller of `req` for this worker thread (caller()), or answers 401/403 and returns Handled.
httplib::Server::HandlerResponse authenticate(const AgentState& state, const httplib::Request& req,
                                              httplib::Response& res);

// The caller authenticate() named for the request this worker thread serves. On a public route, nobody: an
// agent that acts for no grant, so a route that forgot to say it is public refuses everyone.
const Caller& caller();

}  // namespace conduit::agent::rest
