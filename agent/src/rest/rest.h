// The agent's REST API (agent/openapi.yaml) on cpp-httplib: what main() hands it and the one call that puts
// it on a server. Every route under /v1 needs a caller (a client certificate or the bearer token:
// rest/identity.h) that the route lets in; /healthz, /readyz and /metrics do not. Every error is
// {"error": {"code", "message"}} with a 4xx/5xx.
//
// These two names stay in conduit::agent, where main() builds the state; everything behind them is
// conduit::agent::rest.
#pragma once

#include <httplib.h>

#include <atomic>

#include "conduit/api/reshard_plan.h"
#include "conduit/common/token_file.h"
#include "config.h"
#include "grants.h"
#include "node_certificate.h"
#include "regions.h"
#include "transfer/manager.h"
#include "transport_set.h"

namespace conduit::metrics {
class AgentMetrics;
}

namespace conduit::agent {

struct AgentState {
  const AgentConfig& config;
  const TransportSet& transports;
  RegionStore& regions;
  GrantTable& grants;
  TransferManager& transfers;
  metrics::AgentMetrics& metrics;
  const TokenFile*
      token;  // null with --insecure-no-auth or certificates alone; re-read when its file changes
  std::atomic<bool> ready{false};  // /readyz: 200 once started, 503 while shutting down
  std::atomic<int> long_polls{0};  // requests waiting for a region version or a transfer's end
  const NodeCertificate* node_certificate = nullptr;  // with --node-certificate: /readyz waits for it
  // POST /v1/reshard/plans's cache (rest/reshard_routes.cpp): 64 plans, 2^22 ops (96 MiB of them) in all.
  api::ReshardPlanner reshard_plans{64, 1ULL << 22, api::ReshardLimits{.max_ops = 1ULL << 20}};
};

// Registers every route on `server`, with authentication before routing and JSON error bodies after.
void install_routes(httplib::Server& server, AgentState& state);

}  // namespace conduit::agent
