#include "rest/auth.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>

#include "conduit/api/errors.h"
#include "http_server.h"
#include "rest/reply.h"

namespace conduit::agent::rest {
namespace {

using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

// The three routes a kubelet or Prometheus scrapes without a token.
bool is_public(const std::string& path) {
  return path == "/healthz" || path == "/readyz" || path == "/metrics";
}

// Time depends only on the expected token's length, never on where the presented one first differs.
bool constant_time_equal(std::string_view presented, std::string_view expected) {
  volatile unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff = static_cast<unsigned char>(diff | (p ^ static_cast<unsigned char>(expected[i])));
  }
  return diff == 0;
}

// "Bearer <token>" with the scheme matched case-insensitively (RFC 7235); nullopt for any other scheme.
std::optional<std::string_view> bearer_token(std::string_view header) {
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size() || header[kScheme.size()] != ' ') return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return std::nullopt;
  }
  auto token = header.substr(kScheme.size());
  token.remove_prefix(std::min(token.find_first_not_of(' '), token.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

// Set by authenticate() before routing, read by the route's access check and by the handler (rest/call.h).
thread_local std::optional<Caller> t_caller;

// The body of a refused request is never read; closing keeps it from being parsed as the next request.
HandlerResponse refuse(Response& res, int status, std::string_view code, const std::string& message) {
  res.set_header("Connection", "close");
  close_after_response();
  send_error(res, status, code, message);
  return HandlerResponse::Handled;
}

HandlerResponse unauthorized(Response& res, const std::string& message, bool presented) {
  // RFC 6750: error="invalid_token" only when a token was presented.
  res.set_header("WWW-Authenticate", presented ? R"(Bearer realm="conduit", error="invalid_token")"
                                               : R"(Bearer realm="conduit")");
  return refuse(res, 401, api::code::kUnauthorized, message);
}

// A certificate that names no identity is refused even with a token: it is a mistake worth seeing.
HandlerResponse by_certificate(const PeerCertificate& peer, Response& res) {
  const std::string& name = peer.name;
  t_caller = caller_from_certificate(name);
  if (t_caller && peer.agent_signer && (t_caller->role != Role::Agent || t_caller->node.empty())) {
    // The signer of node certificates holds a key that must not mint controllers or operators.
    t_caller.reset();
    return refuse(res, 403, api::code::kForbidden,
                  "the client certificate names \"" + name +
                      "\", but it is signed by the agents' CA (--agent-client-ca-file), whose certificates "
                      "may name one node's agent alone (conduit:agent:<node>)");
  }
  if (t_caller) return HandlerResponse::Unhandled;
  return refuse(res, 403, api::code::kForbidden,
                "the client certificate names \"" + name +
                    "\", which is no Conduit identity (conduit:controller, conduit:controller:<namespace>, "
                    "conduit:operator, conduit:agent or conduit:agent:<node>)");
}

}  // namespace

HandlerResponse authenticate(const AgentState& state, const Request& req, Response& res) {
  t_caller.reset();
  if (is_public(req.path)) return HandlerResponse::Unhandled;
  if (const PeerCertificate& peer = tls_peer(); !peer.name.empty()) return by_certificate(peer, res);
  if (state.config.insecure_no_auth) {
    t_caller = Caller{Role::Operator, {}, {}};  // local mode
    return HandlerResponse::Unhandled;
  }
  if (state.token == nullptr) {
    return unauthorized(res, "this agent takes client certificates only (it has no --token-file)", false);
  }
  const std::string header = req.get_header_value("Authorization");  // by value: keep it alive for the view
  const auto token = bearer_token(header);
  if (token && constant_time_equal(*token, state.token->current())) {
    t_caller = Caller{Role::Operator, {}, {}};
    return HandlerResponse::Unhandled;
  }
  return unauthorized(res, token ? "invalid bearer token" : "missing bearer token", token.has_value());
}

const Caller& caller() {
  static const Caller kNobody{Role::Agent, "\x01", {}};  // acts for no grant: a route without one is refused
  return t_caller ? *t_caller : kNobody;
}

}  // namespace conduit::agent::rest
