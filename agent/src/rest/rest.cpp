#include "rest/rest.h"

#include <algorithm>

#include "rest/auth.h"
#include "rest/body.h"
#include "rest/router.h"
#include "rest/routes.h"

namespace conduit::agent {

void install_routes(httplib::Server& server, AgentState& state) {
  using HandlerResponse = httplib::Server::HandlerResponse;
  // httplib's own bound is the largest any route takes; each route's own is checked on its body
  // (rest/body.h).
  server.set_payload_max_length(std::max(state.config.max_body_bytes, rest::kReshardPlanBodyBytes));
  // Before routing, so a route added later cannot forget to check the caller.
  server.set_pre_routing_handler([&state](const httplib::Request& req, httplib::Response& res) {
    const auto authenticated = rest::authenticate(state, req, res);
    return authenticated == HandlerResponse::Handled ? authenticated : rest::refuse_unbounded_body(req, res);
  });

  rest::Router router(server, state);
  rest::install_health_routes(router);
  rest::install_region_routes(router);
  rest::install_ack_routes(router);
  rest::install_grant_routes(router);
  rest::install_file_routes(router);
  rest::install_transfer_routes(router);
  rest::install_reshard_routes(router);
  router.install_error_handlers();
}

}  // namespace conduit::agent
