// The routes of agent/openapi.yaml, one installer per resource, each in its own file.
#pragma once

#include "files/save_file.h"
#include "metrics/agent_metrics.h"
#include "rest/router.h"

namespace conduit::agent::rest {

void install_health_routes(Router& r);    // /healthz, /readyz, /metrics, /v1/node
void install_region_routes(Router& r);    // /v1/regions...
void install_ack_routes(Router& r);       // /v1/regions/{name}/acks
void install_grant_routes(Router& r);     // /v1/grants..., /v1/regions/{name}/grants
void install_file_routes(Router& r);      // /v1/files/stat
void install_transfer_routes(Router& r);  // /v1/transfers...
void install_reshard_routes(Router& r);   // /v1/reshard/plans

// conduit_agent_file_write_bytes_total: which way a save's bytes went to its file (a region saved, a grant's
// landed bytes saved as they land).
inline void count_written(metrics::AgentMetrics& metrics, const WrittenBytes& written) {
  metrics.add_file_write("direct", static_cast<double>(written.direct));
  metrics.add_file_write("page_cache", static_cast<double>(written.cached));
}

}  // namespace conduit::agent::rest
