// What a kubelet, Prometheus and the controller ask about the agent itself: alive, ready, its metrics, and
// its node's inventory.
#include <string>

#include "conduit/api/errors.h"
#include "inventory.h"
#include "metrics/agent_metrics.h"
#include "rest/reply.h"
#include "rest/routes.h"

namespace conduit::agent::rest {
namespace {

constexpr const char* kMetricsType = "text/plain; version=0.0.4";

void healthz(Call& c) {
  // Alive but unable to move bytes on some rail until restarted: say so, so the kubelet restarts it.
  for (const auto& transport : c.state.transports.transports()) {
    if (auto health = transport->health(); !health) {
      return send_error(c.res, 503, api::wire_code(health.error().code),
                        std::string(transport->name()) + ": " + health.error().message);
    }
  }
  c.reply(200, {{"status", "ok"}});
}

void readyz(Call& c) {
  if (!c.state.ready.load()) {
    return send_error(c.res, 503, api::wire_code(ErrorCode::Unavailable), "the agent is not ready");
  }
  // Other agents accept this one's calls only with its node certificate.
  if (c.state.node_certificate != nullptr) {
    if (auto why = c.state.node_certificate->not_ready()) {
      return send_error(c.res, 503, api::wire_code(ErrorCode::Unavailable), *why);
    }
  }
  c.reply(200, {{"status", "ready"}});
}

}  // namespace

void install_health_routes(Router& r) {
  r.get("/healthz", healthz, RouteAccess::Public);
  r.get("/readyz", readyz, RouteAccess::Public);
  r.get(
      "/metrics", [](Call& c) { c.res.set_content(c.state.metrics.serialize(), kMetricsType); },
      RouteAccess::Public);
  r.get("/v1/node", [](Call& c) {
    nlohmann::json node = node_inventory(c.state.config, c.state.transports, c.state.regions);
    node["paths"] = c.state.transfers.path_totals();  // docs/path.md
    c.reply(200, node);
  });
}

}  // namespace conduit::agent::rest
