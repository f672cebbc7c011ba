#include "api.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api_requests.h"
#include "conduit/api/errors.h"
#include "conduit/common/log.h"
#include "http_server.h"
#include "identity.h"
#include "inventory.h"
#include "metrics/agent_metrics.h"
#include "peer_access.h"

namespace conduit::agent {
namespace {

// conduit_agent_file_write_bytes_total: which way a save's bytes went to its file.
void count_written(metrics::AgentMetrics& metrics, const WrittenBytes& written) {
  metrics.add_file_write("direct", static_cast<double>(written.direct));
  metrics.add_file_write("page_cache", static_cast<double>(written.cached));
}

using httplib::Request;
using httplib::Response;
using json = nlohmann::json;
using HandlerResponse = httplib::Server::HandlerResponse;

constexpr const char* kJsonType = "application/json";
constexpr const char* kMetricsType = "text/plain; version=0.0.4";
// A checksum answer is a JSON array of one number per slice; this bounds it to ~10 MiB of text.
constexpr std::uint64_t kMaxChecksumSlices = 1u << 20;

// Path templates as agent/openapi.yaml writes them; each {placeholder} is one path segment.
constexpr const char* kRegion = "/v1/regions/{name}";
constexpr const char* kRegionSave = "/v1/regions/{name}/save";
constexpr const char* kRegionChecksum = "/v1/regions/{name}/checksum";
constexpr const char* kRegionVersion = "/v1/regions/{name}/version";
// Long-polls (region versions, transfer ends) hold a worker thread each: at most this many at once (half
// the server's threads), so waiters never starve the API.
constexpr int kMaxLongPolls = 32;
constexpr const char* kRegionGrants = "/v1/regions/{name}/grants";
constexpr const char* kRegionStaging = "/v1/regions/{name}/staging";
constexpr const char* kGrant = "/v1/grants/{id}";
constexpr const char* kGrantLanded = "/v1/grants/{id}/landed";
constexpr const char* kGrantCommit = "/v1/grants/{id}/commit";
constexpr const char* kGrantRenew = "/v1/grants/{id}/renew";
// A ring grant's ring is a multiple of this, so a writer can cut it into equal segments.
constexpr std::uint64_t kRingUnit = 64u << 10;
constexpr const char* kTransfer = "/v1/transfers/{id}";

// Never throws: a message may echo client bytes that are not valid UTF-8.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), kJsonType);
}

void send_error(Response& res, int status, std::string_view code, std::string_view message) {
  send_json(res, status, {{"error", {{"code", code}, {"message", message}}}});
}

// The one table of codes and statuses every client reads back (conduit/api/errors.h).
void send_error(Response& res, const Error& error) {
  send_error(res, api::http_status(error.code), api::wire_code(error.code), error.message);
}

json items(json array) { return {{"items", std::move(array)}}; }

// The three routes a kubelet or Prometheus scrapes without a token. Everything else, known route or not,
// needs one, so an unauthenticated caller learns nothing about which routes exist.
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

// The caller of the request this worker thread serves: set by authorize() before routing, read by the
// route's access check and by handlers that scope what an agent may touch. Unset on public routes.
thread_local std::optional<Caller> t_caller;

const Caller& caller() {
  static const Caller kNobody{Role::Agent, "\x01", {}};  // acts for no grant: a route without one is refused
  return t_caller ? *t_caller : kNobody;
}

HandlerResponse unauthorized(Response& res, const std::string& message, bool presented) {
  // RFC 6750: error="invalid_token" only when a token was presented.
  res.set_header("WWW-Authenticate", presented ? R"(Bearer realm="conduit", error="invalid_token")"
                                               : R"(Bearer realm="conduit")");
  // The body of a refused request is never read; closing keeps it from being parsed as the next request.
  res.set_header("Connection", "close");
  close_after_response();
  send_error(res, 401, api::code::kUnauthorized, message);
  return HandlerResponse::Handled;
}

// Who calls (identity.h): a verified certificate that names an identity, else the token, which names the
// operator. A certificate that names none is refused even with a token: it is a mistake worth seeing.
HandlerResponse authorize(const AgentState& state, const Request& req, Response& res) {
  t_caller.reset();
  if (is_public(req.path)) return HandlerResponse::Unhandled;
  if (const PeerCertificate& peer = tls_peer(); !peer.name.empty()) {
    const std::string& name = peer.name;
    t_caller = caller_from_certificate(name);
    if (t_caller && peer.agent_signer && (t_caller->role != Role::Agent || t_caller->node.empty())) {
      // The signer of node certificates holds a key that must not mint controllers or operators.
      t_caller.reset();
      res.set_header("Connection", "close");
      close_after_response();
      send_error(res, 403, api::code::kForbidden,
                 "the client certificate names \"" + name +
                     "\", but it is signed by the agents' CA (--agent-client-ca-file), whose certificates "
                     "may name one node's agent alone (conduit:agent:<node>)");
      return HandlerResponse::Handled;
    }
    if (t_caller) return HandlerResponse::Unhandled;
    res.set_header("Connection", "close");
    close_after_response();
    send_error(res, 403, api::code::kForbidden,
               "the client certificate names \"" + name +
                   "\", which is no Conduit identity (conduit:controller, conduit:controller:<namespace>, "
                   "conduit:operator, conduit:agent or conduit:agent:<node>)");
    return HandlerResponse::Handled;
  }
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

// 403 for a caller that may not use this route, or this grant, region or transfer on it.
void forbid(Response& res, const Request& req, const std::string& what = "") {
  send_error(
      res, 403, api::code::kForbidden,
      caller().describe() + " may not " + req.method + " " + req.path + (what.empty() ? "" : ": " + what));
}

// cpp-httplib 0.11 bounds a body only by its Content-Length: a chunked one, or a POST without a length (read
// until the connection closes), went into memory whole before any check (300 MiB did, tests/hostile). JSON
// bodies always come with a length, so neither is accepted; the body is left unread and the connection
// closed.
HandlerResponse refuse_unbounded_body(const Request& req, Response& res) {
  const bool has_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
  if (!req.has_header("Transfer-Encoding") && (!has_body || req.has_header("Content-Length"))) {
    return HandlerResponse::Unhandled;
  }
  res.set_header("Connection", "close");
  close_after_response();
  send_error(res, 411, api::code::kLengthRequired,
             "a request body needs a Content-Length (chunked bodies are not accepted)");
  return HandlerResponse::Handled;
}

// Content-Type, then size, then JSON syntax, then "is an object": the first failure answers.
std::optional<json> read_json_body(const AgentState& state, const Request& req, Response& res) {
  std::string media_type = req.get_header_value("Content-Type");
  media_type = media_type.substr(0, media_type.find(';'));
  media_type.erase(std::remove(media_type.begin(), media_type.end(), ' '), media_type.end());
  std::transform(media_type.begin(), media_type.end(), media_type.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (media_type != kJsonType) {
    send_error(res, 415, api::code::kUnsupportedMediaType, "the body must be application/json");
    return std::nullopt;
  }
  // httplib refuses oversized bodies it knows the length of up front; this also covers any it read whole.
  if (req.body.size() > state.config.max_body_bytes) {
    send_error(res, 413, api::code::kPayloadTooLarge,
               "the body exceeds " + std::to_string(state.config.max_body_bytes) + " bytes");
    return std::nullopt;
  }
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    send_error(res, 400, api::code::kMalformedJson, "the body is not valid JSON");
    return std::nullopt;
  }
  if (!body.is_object()) {
    send_error(res, 400, api::wire_code(ErrorCode::InvalidArgument), "the body must be a JSON object");
    return std::nullopt;
  }
  return body;
}

// The region name captured from the path, or a 400 already sent.
std::optional<std::string> region_name(const Request& req, Response& res) {
  std::string name = req.matches[1];
  if (auto valid = validate_name(name); !valid) {
    send_error(res, valid.error());
    return std::nullopt;
  }
  return name;
}

std::optional<std::string> path_id(const Request& req, Response& res) {
  std::string id = req.matches[1];
  if (auto valid = validate_id(id); !valid) {
    send_error(res, valid.error());
    return std::nullopt;
  }
  return id;
}

// "/v1/regions/{name}" -> the regex httplib matches, "/v1/regions/([^/]+)", capturing each placeholder.
std::string to_httplib_pattern(std::string_view path_template) {
  std::string pattern;
  for (std::size_t at = 0; at < path_template.size();) {
    if (path_template[at] == '{') {
      pattern += "([^/]+)";
      at = path_template.find('}', at) + 1;
    } else {
      pattern += path_template[at++];
    }
  }
  return pattern;
}

// Whether `path` fits the template segment by segment. Done by hand rather than with std::regex so the
// 404/405 decision costs no regex engine (and GCC 12's <regex> trips -Wmaybe-uninitialized under ASan).
bool fits_template(std::string_view path_template, std::string_view path) {
  for (;;) {
    const auto t_end = std::min(path_template.find('/'), path_template.size());
    const auto p_end = std::min(path.find('/'), path.size());
    const auto t_segment = path_template.substr(0, t_end);
    const auto p_segment = path.substr(0, p_end);
    const bool placeholder = t_segment.starts_with('{');
    if (placeholder ? p_segment.empty() : t_segment != p_segment) return false;
    const bool t_last = t_end == path_template.size();
    const bool p_last = p_end == path.size();
    if (t_last || p_last) return t_last && p_last;
    path_template.remove_prefix(t_end + 1);
    path.remove_prefix(p_end + 1);
  }
}

// The request's query parameters alone: httplib puts a form body's fields into `params` too.
httplib::Params query_of(const Request& req) {
  httplib::Params params;
  if (const auto q = req.target.find('?'); q != std::string::npos) {
    httplib::detail::parse_query_text(req.target.substr(q + 1), params);
  }
  return params;
}

// Registers each route with httplib and remembers (method, template) so the error handler can tell
// "no such route" (404) from "no such method on this route" (405).
class Router {
 public:
  struct Route {
    std::string method;
    std::string path_template;
  };
  using Handler = std::function<void(const Request&, Response&)>;

  explicit Router(httplib::Server& server)
      : server_(server), routes_(std::make_shared<std::vector<Route>>()) {}

  // The query parameters a route takes; any other is refused with 400 before its handler runs, so a
  // parameter a route does not read (?namespace= where nothing is scoped by it) never passes for applied.
  using Query = std::vector<std::string>;

  // Every route says who it lets in (identity.h); Control unless said otherwise.
  void get(const std::string& path_template, Handler h, RouteAccess access = RouteAccess::Control,
           Query query = {}) {
    add("GET", path_template, std::move(h), access, std::move(query));
  }
  void post(const std::string& path_template, Handler h, RouteAccess access = RouteAccess::Control,
            Query query = {}) {
    add("POST", path_template, std::move(h), access, std::move(query));
  }
  void del(const std::string& path_template, Handler h, RouteAccess access = RouteAccess::Control,
           Query query = {}) {
    add("DELETE", path_template, std::move(h), access, std::move(query));
  }

  std::shared_ptr<const std::vector<Route>> routes() const { return routes_; }

 private:
  void add(const std::string& method, const std::string& path_template, Handler handler, RouteAccess access,
           Query query) {
    routes_->push_back({method, path_template});
    const std::string pattern = to_httplib_pattern(path_template);
    auto guarded = [handler = std::move(handler), access, query = std::move(query),
                    what = method + " " + path_template](const Request& req, Response& res) {
      if (access != RouteAccess::Public && !admits(access, caller())) return forbid(res, req);
      for (const auto& [key, value] : query_of(req)) {
        if (std::find(query.begin(), query.end(), key) != query.end()) continue;
        std::string takes;
        for (const auto& name : query) takes += (takes.empty() ? "" : ", ") + name;
        return send_error(res, 400, api::wire_code(ErrorCode::InvalidArgument),
                          "unknown query parameter \"" + key + "\": " + what +
                              (takes.empty() ? " takes none" : " takes " + takes));
      }
      try {
        handler(req, res);
      } catch (const std::exception& e) {
        log::error("unhandled exception in request",
                   {{"method", req.method}, {"path", req.path}, {"what", e.what()}});
        send_error(res, 500, api::code::kInternal, "internal error");
      } catch (...) {
        log::error("unhandled exception in request", {{"method", req.method}, {"path", req.path}});
        send_error(res, 500, api::code::kInternal, "internal error");
      }
    };
    if (method == "GET") server_.Get(pattern, std::move(guarded));
    if (method == "POST") server_.Post(pattern, std::move(guarded));
    if (method == "DELETE") server_.Delete(pattern, std::move(guarded));
  }

  httplib::Server& server_;
  std::shared_ptr<std::vector<Route>> routes_;
};

// The methods served on `path`, as an Allow header lists them; empty when no route matches the path.
std::string allowed_methods(const std::vector<Router::Route>& routes, const std::string& path) {
  std::string allow;
  for (const auto& route : routes) {
    if (fits_template(route.path_template, path) && allow.find(route.method) == std::string::npos) {
      allow += (allow.empty() ? "" : ", ") + route.method;
    }
  }
  return allow;
}

// Gives every response httplib makes by itself (unknown route, oversized body, unparsable request) our
// JSON error body. Responses our handlers made already carry one and pass through untouched.
HandlerResponse fill_error(const std::vector<Router::Route>& routes, const Request& req, Response& res) {
  if (!res.body.empty()) return HandlerResponse::Unhandled;
  // httplib answers an unrouted method 404, or 400 for a PUT or PATCH without a body: on a known path
  // both mean the method is wrong.
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  const std::string allow = allowed_methods(routes, req.path);
  if ((res.status == 404 || res.status == 400) && !allow.empty() && allow.find(method) == std::string::npos) {
    res.set_header("Allow", allow);
    send_error(res, 405, api::code::kMethodNotAllowed,
               req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
    return HandlerResponse::Handled;
  }
  switch (res.status) {
    case 404:
      send_error(res, 404, api::code::kRouteNotFound, "no route " + req.method + " " + req.path);
      break;
    case 413:
      send_error(res, 413, api::code::kPayloadTooLarge, "the body is larger than this agent accepts");
      break;
    case 414:
      send_error(res, 414, api::code::kUriTooLong, "the request URI is too long");
      break;
    case 400:
      send_error(res, 400, api::code::kBadRequest, "the request could not be parsed as HTTP");
      break;
    case 500:
      send_error(res, 500, api::code::kInternal, "internal error");
      break;
    default:
      send_error(res, res.status, api::code::kHttpError, "HTTP error " + std::to_string(res.status));
      break;
  }
  return HandlerResponse::Handled;
}

// One of kMaxLongPolls waits under way, for as long as it lives; false when there are that many already.
class LongPoll {
 public:
  explicit LongPoll(AgentState& state) : state_(state), held_(state.long_polls.fetch_add(1) < kMaxLongPolls) {
    if (!held_) state_.long_polls.fetch_sub(1);
  }
  ~LongPoll() {
    if (held_) state_.long_polls.fetch_sub(1);
  }
  LongPoll(const LongPoll&) = delete;
  LongPoll& operator=(const LongPoll&) = delete;
  explicit operator bool() const { return held_; }
  void refuse(Response& res) const {
    res.set_header("Retry-After", "1");
    send_error(
        res, 429, api::wire_code(ErrorCode::ResourceExhausted),
        "already " + std::to_string(kMaxLongPolls) + " long-polls under way; retry, or ask without waiting");
  }

 private:
  AgentState& state_;
  bool held_;
};

void install_health_routes(Router& r, AgentState& state) {
  r.get(
      "/healthz",
      [&state](const Request&, Response& res) {
        // Alive but unable to move bytes on some rail until restarted: say so, so the kubelet restarts it.
        for (const auto& transport : state.transports.transports()) {
          if (auto health = transport->health(); !health) {
            return send_error(res, 503, api::wire_code(health.error().code),
                              std::string(transport->name()) + ": " + health.error().message);
          }
        }
        send_json(res, 200, {{"status", "ok"}});
      },
      RouteAccess::Public);
  r.get(
      "/readyz",
      [&state](const Request&, Response& res) {
        if (state.ready.load()) {
          // Other agents accept this one's calls only with its node certificate.
          if (state.node_certificate != nullptr) {
            if (auto why = state.node_certificate->not_ready()) {
              return send_error(res, 503, api::wire_code(ErrorCode::Unavailable), *why);
            }
          }
          send_json(res, 200, {{"status", "ready"}});
        } else {
          send_error(res, 503, api::wire_code(ErrorCode::Unavailable), "the agent is not ready");
        }
      },
      RouteAccess::Public);
  r.get(
      "/metrics",
      [&state](const Request&, Response& res) { res.set_content(state.metrics.serialize(), kMetricsType); },
      RouteAccess::Public);
  r.get("/v1/node", [&state](const Request&, Response& res) {
    send_json(res, 200, node_inventory(state.config, state.transports, state.regions));
  });
}

// Why the caller may not act on `grant`, or nullopt: an agent acts only on the grants made for it, a
// tenant's controller only on those made for its namespace.
std::optional<std::string> grant_refusal(const Grant& grant) {
  const Caller& c = caller();
  if (c.tenant_controller()) {
    if (grant.job_namespace == c.ns) return std::nullopt;
    return "the grant is not made for its namespace";
  }
  if (c.acts_for(grant.peer)) return std::nullopt;
  return "the grant is made for another node";
}

// The same for grant `id`. An unknown grant passes, so the handler answers NotFound as for anyone.
std::optional<std::string> grant_refusal(const AgentState& state, const std::string& id) {
  auto grant = state.grants.get(id);
  return grant ? grant_refusal(**grant) : std::nullopt;
}

// Whether the caller may read region `name` (checksums, staging copies, sending it on): an agent only while
// a grant on the region is made for it, that is while a transfer between the two is under way.
bool may_touch_region(const AgentState& state, const std::string& name) {
  if (caller().role != Role::Agent) return true;
  for (const auto& grant : state.grants.list()) {
    const RegionPtr& region = grant->region.get();
    if (region && region->name() == name && caller().acts_for(grant->peer)) return true;
  }
  return false;
}

// 403 (and true) when the caller, an agent, may not `reach` `length` bytes at `offset` of region `name`: no
// live grant of `grants` made for it allows that (peer_access.h).
bool out_of_reach(Response& res, const Request& req, const std::vector<std::shared_ptr<const Grant>>& grants,
                  const std::string& name, Reach reach, std::uint64_t offset, std::uint64_t length) {
  auto why = peer_refusal(grants, caller(), name, reach, offset, length, std::chrono::system_clock::now());
  if (why) forbid(res, req, *why);
  return why.has_value();
}

// The same against the grants as they are now.
bool out_of_reach(Response& res, const Request& req, const AgentState& state, const std::string& name,
                  Reach reach, std::uint64_t offset, std::uint64_t length) {
  return out_of_reach(res, req, state.grants.list(), name, reach, offset, length);
}

// The same for what an agent's transfer request touches of its source region: each scatter op's range, or
// the one range (to the region's end when its length is 0). A region that is not there passes: the
// transfer fails to start with NotFound as for anyone.
bool agent_out_of_reach(Response& res, const Request& req, const AgentState& state,
                        const TransferRequest& request) {
  const Reach reach = request.op == OpKind::Read ? Reach::Write : Reach::Read;
  const std::string& name = request.source_region;
  // One look at the grants for all the ops (up to kMaxScatterOps), not a copy of the table per op.
  const auto grants = state.grants.list();
  for (const ScatterOp& op : request.ops) {
    if (out_of_reach(res, req, grants, name, reach, op.source_offset, op.length)) return true;
  }
  if (!request.ops.empty()) return false;
  std::uint64_t length = request.length;
  if (length == 0) {
    auto region = state.regions.get(name);
    if (!region) return false;
    length = (*region)->bytes() > request.offset ? (*region)->bytes() - request.offset : 0;
  }
  return out_of_reach(res, req, state, name, reach, request.offset, length);
}

// Whether the caller may look at or cancel a transfer: anyone but an agent or a tenant's controller, or
// the one that asked for it.
bool may_see_transfer(const TransferStatus& status) {
  if (caller().role != Role::Agent && !caller().tenant_controller()) return true;
  return status.requested_by == caller().describe();
}

// The same for transfer `id`. An unknown transfer passes, so the handler answers NotFound as for anyone.
bool may_see_transfer(const AgentState& state, const std::string& id) {
  auto status = state.transfers.get(id);
  return !status || may_see_transfer(*status);
}

// The namespace a request on one region, grant or transfer (its DELETE, a transfer's GET) is held to ("" =
// none), or nullopt after answering 400. A tenant's controller is held to its own. The cluster's controller
// names the job's (`?namespace=`) when it looks at or releases what a job's run record lists: whoever may
// edit the TransferJob may write that record, so the agent, not the record, decides that the object is that
// namespace's.
std::optional<std::string> held_namespace(const Request& req, Response& res) {
  if (caller().tenant_controller()) return caller().ns;
  if (!req.has_param("namespace")) return std::string();
  if (req.get_param_value_count("namespace") > 1) {
    send_error(res,
               make_error(ErrorCode::InvalidArgument, "query parameter \"namespace\" given more than once"));
    return std::nullopt;
  }
  std::string ns = req.get_param_value("namespace");
  if (!valid_namespace(ns)) {
    send_error(res, make_error(ErrorCode::InvalidArgument,
                               "namespace: must be a namespace name (a DNS-1123 label)"));
    return std::nullopt;
  }
  return ns;
}

// Why transfer `id` is out of reach of a request held to `ns` (held_namespace), or nullopt. An unknown
// transfer passes, so the handler answers NotFound as for anyone.
std::optional<std::string> transfer_not_of(const AgentState& state, const std::string& id,
                                           const std::string& ns) {
  auto status = state.transfers.get(id);
  if (!status || ns.empty() || status->job_namespace == ns) return std::nullopt;
  return "the transfer is not made for namespace " + ns;
}

// A tenant's controller (identity.h) acts for its own namespace alone. What a request names: 403 saying why
// (and true) unless the caller may act for `job_ns`.
bool out_of_scope(Response& res, const Request& req, const std::string& job_ns) {
  auto why = caller().namespace_refusal(job_ns);
  if (why) send_error(res, 403, api::code::kForbidden, *why + " (" + req.method + " " + req.path + ")");
  return why.has_value();
}

// What exists: a tenant's controller reads the regions its namespace may use (its own, those shared with
// it, those of no namespace) and changes only its own.
bool may_read_region(const Region& region) {
  const Caller& c = caller();
  return !c.tenant_controller() || region.tenancy().admits(c.ns);
}
bool region_out_of_scope(Response& res, const Request& req, const Region& region, bool changes) {
  const Caller& c = caller();
  if (!c.tenant_controller()) return false;
  if (changes ? region.tenancy().ns == c.ns : may_read_region(region)) return false;
  forbid(res, req, "region " + region.name() + " is not of its namespace");
  return true;
}

// A file's error as its answer: one that leads out of the job's namespace's directory is refused (403).
void send_file_error(Response& res, const Request& req, const Error& error) {
  if (error.code == ErrorCode::Forbidden) return forbid(res, req, error.message);
  send_error(res, error);
}

// A region as GET shows it, with the rails (and their NICs) each transport registers it on: the ones
// nearest its memory (conduit/rail_choice.h), decided again at each registration from the same inputs.
json region_json(const AgentState& state, const Region& region) {
  json out = region.to_json();
  out["rails"] = state.transports.rails_json(region.memory());
  return out;
}

void install_region_routes(Router& r, AgentState& state) {
  r.get("/v1/regions", [&state](const Request&, Response& res) {
    json list = json::array();
    for (const auto& region : state.regions.list()) {
      if (may_read_region(*region)) list.push_back(region_json(state, *region));
    }
    send_json(res, 200, items(std::move(list)));
  });

  r.post("/v1/regions", [&state](const Request& req, Response& res) {
    const auto body = read_json_body(state, req, res);
    if (!body) return;
    auto request = parse_create_region(*body);
    if (!request) return send_error(res, request.error());
    if (out_of_scope(res, req, request->tenancy.ns)) return;
    if (request->file) {
      if (auto why = file_refusal(*request->file, request->tenancy.ns, state.config.namespace_files))
        return forbid(res, req, *why);
      if (auto path = DataDir::normal(*request->file); !path) return send_error(res, path.error());
    }
    auto region =
        request->file
            ? state.regions.load(request->name, *request->file, request->tenancy,
                                 file_namespace(request->tenancy.ns, state.config.namespace_files))
            : state.regions.create(request->name, request->bytes, request->memory, request->tenancy);
    if (!region) return send_file_error(res, req, region.error());
    res.set_header("Location", "/v1/regions/" + request->name);
    send_json(res, 201, region_json(state, **region));
  });

  r.get(kRegion, [&state](const Request& req, Response& res) {
    const auto name = region_name(req, res);
    if (!name) return;
    auto region = state.regions.get(*name);
    if (!region) return send_error(res, region.error());
    if (region_out_of_scope(res, req, **region, /*changes=*/false)) return;
    send_json(res, 200, region_json(state, **region));
  });

  r.del(kRegion,
        [&state](const Request& req, Response& res) {
          const auto name = region_name(req, res);
          if (!name) return;
          const auto ns = held_namespace(req, res);
          if (!ns) return;
          if (!ns->empty()) {
            auto region = state.regions.get(*name);
            if (!region) return send_error(res, region.error());
            if (region_out_of_scope(res, req, **region, /*changes=*/true)) return;
            if ((*region)->tenancy().ns != *ns) {
              return forbid(res, req, "region " + *name + " is not of namespace " + *ns);
            }
          }
          if (auto removed = state.regions.remove(*name); !removed) return send_error(res, removed.error());
          res.status = 204;
        },
        RouteAccess::Control, {"namespace"});

  r.post(kRegionSave, [&state](const Request& req, Response& res) {
    const auto name = region_name(req, res);
    if (!name) return;
    const auto body = read_json_body(state, req, res);
    if (!body) return;
    auto save = parse_save_region(*body);
    if (!save) return send_error(res, save.error());
    if (out_of_scope(res, req, save->job_namespace)) return;
    if (auto why = file_refusal(save->file, save->job_namespace, state.config.namespace_files))
      return forbid(res, req, *why);
    if (auto path = DataDir::normal(save->file); !path) return send_error(res, path.error());
    auto region = state.regions.get(*name);
    if (!region) return send_error(res, region.error());
    if (region_out_of_scope(res, req, **region, /*changes=*/false)) return;
    auto saved = state.regions.save(*name, save->file,
                                    file_namespace(save->job_namespace, state.config.namespace_files));
    if (!saved) return send_file_error(res, req, saved.error());
    count_written(state.metrics, *saved);
    send_json(res, 200, {{"region", *name}, {"file", save->file}, {"bytes", (*region)->bytes()}});
  });

  r.get(kRegionVersion,
        [&state](const Request& req, Response& res) {
          const auto name = region_name(req, res);
          if (!name) return;
          auto query = parse_version_query(req.params);
          if (!query) return send_error(res, query.error());
          auto region = state.regions.get(*name);
          if (!region) return send_error(res, region.error());
          if (region_out_of_scope(res, req, **region, /*changes=*/false)) return;
          Region::Update update = (*region)->update();
          if (update.version <= query->after && query->timeout.count() > 0) {
            LongPoll slot(state);
            if (!slot) return slot.refuse(res);
            update = (*region)->wait_newer(query->after, std::min(query->timeout, state.config.long_poll_max),
                                           [&state] { return !state.ready.load(); });
          }
          send_json(res, 200, update.to_json(*name));
        },
        RouteAccess::Control, {"after", "timeoutSeconds"});

  r.get(kRegionChecksum,
        [&state](const Request& req, Response& res) {
          const auto name = region_name(req, res);
          if (!name) return;
          if (!may_touch_region(state, *name))
            return forbid(res, req, "no grant on the region is made for it");
          auto query = parse_checksum_query(req.params);
          if (!query) return send_error(res, query.error());
          auto region = state.regions.get(*name);
          if (!region) return send_error(res, region.error());
          if (region_out_of_scope(res, req, **region, /*changes=*/false)) return;
          const std::uint64_t size = (*region)->bytes();
          if (query->offset > size) {
            return send_error(res, 400, api::wire_code(ErrorCode::InvalidArgument),
                              "offset " + std::to_string(query->offset) + " is past the end of the region (" +
                                  std::to_string(size) + " bytes)");
          }
          const std::uint64_t length = query->length == 0 ? size - query->offset : query->length;
          if (out_of_reach(res, req, state, *name, Reach::Read, query->offset, length)) return;
          if (length / query->slice >= kMaxChecksumSlices) {
            return send_error(res, 400, api::wire_code(ErrorCode::InvalidArgument),
                              "too many slices: use a larger slice or a shorter length");
          }
          auto crcs = region_checksum(**region, query->offset, length, query->slice);
          if (!crcs) return send_error(res, crcs.error());
          send_json(res, 200,
                    {{"region", *name},
                     {"offset", query->offset},
                     {"length", length},
                     {"slice", query->slice},
                     {"crc32c", *crcs}});
        },
        RouteAccess::Peer, {"offset", "length", "slice"});
}

// A peer that wrote into (or is about to read from) a staged CUDA region's host staging buffer has this
// agent copy the range between buffer and device (docs/gpu.md).
void install_staging_route(Router& r, AgentState& state) {
  r.post(
      kRegionStaging,
      [&state](const Request& req, Response& res) {
        const auto name = region_name(req, res);
        if (!name) return;
        if (!may_touch_region(state, *name)) return forbid(res, req, "no grant on the region is made for it");
        const auto body = read_json_body(state, req, res);
        if (!body) return;
        auto request = parse_staging(*body);
        if (!request) return send_error(res, request.error());
        auto region = state.regions.get(*name);
        if (!region) return send_error(res, region.error());
        if (region_out_of_scope(res, req, **region, /*changes=*/false)) return;
        const std::uint64_t size = (*region)->bytes();
        if (request->offset > size || request->length > size - request->offset) {
          return send_error(res, 400, api::wire_code(ErrorCode::InvalidArgument),
                            "range [" + std::to_string(request->offset) + ", +" +
                                std::to_string(request->length) + ") is outside region " + *name + " (" +
                                std::to_string(size) + " bytes)");
        }
        if (out_of_reach(res, req, state, *name, request->to_device ? Reach::Write : Reach::Read,
                         request->offset, request->length))
          return;
        // Without a staged grant the region is reached directly (host memory, or device memory the NIC
        // registered): the bytes are where they belong already, and the answer says nothing was copied.
        const auto buffer = state.grants.staging().find(*name);
        if (buffer) {
          auto copied = request->to_device ? buffer->to_device(request->offset, request->length)
                                           : buffer->to_host(request->offset, request->length);
          if (!copied) return send_error(res, copied.error());
        }
        send_json(res, 200,
                  {{"region", *name},
                   {"offset", request->offset},
                   {"length", request->length},
                   {"direction", request->to_device ? "toDevice" : "toHost"},
                   {"copied", buffer != nullptr}});
      },
      RouteAccess::Peer);
}

Result<SaveFile> open_save(const AgentState& state, const std::string& file, const std::string& job_ns) {
  return state.regions.open_save(file, file_namespace(job_ns, state.config.namespace_files));
}

Result<std::shared_ptr<Landing>> grant_landing(const AgentState& state, const std::string& id) {
  auto grant = state.grants.get(id);
  if (!grant) return grant.error();
  if (!(*grant)->landing) {
    return make_error(ErrorCode::Conflict, "grant " + id +
                                               " takes no landing reports: it is a read grant or one of "
                                               "CUDA memory");
  }
  return (*grant)->landing;
}

// What a Chain hop forwards from: its own write grant on the source region, covering the range, whose
// landing reports say how far the bytes have arrived. The transfer holds the grant's Landing, not the
// grant, so revoking the grant still deregisters its key at once; the forwarder then sees it gone.
Result<TransferRequest::Follow> follow_of(const AgentState& state, const TransferRequest& request) {
  const std::string& id = request.follow_grant;
  auto grant = state.grants.get(id);
  if (!grant) return make_error(ErrorCode::NotFound, "source.followGrant: " + grant.error().message);
  const Grant& g = **grant;
  if (g.access != Access::RemoteWrite || !g.landing || g.landing->ring()) {
    return make_error(ErrorCode::InvalidArgument, "source.followGrant: grant " + id +
                                                      " is not a write grant of host memory that takes "
                                                      "landing reports into a region");
  }
  if (g.region->name() != request.source_region || g.offset != 0 || request.offset != 0) {
    return make_error(ErrorCode::InvalidArgument, "source.followGrant: grant " + id + " writes region \"" +
                                                      g.region->name() + "\" from offset " +
                                                      std::to_string(g.offset) + ", not source region \"" +
                                                      request.source_region + "\" from offset 0");
  }
  if (request.length > g.length) {
    return make_error(ErrorCode::InvalidArgument, "source.followGrant: grant " + id + " covers " +
                                                      std::to_string(g.length) + " bytes, fewer than the " +
                                                      std::to_string(request.length) + " to forward");
  }
  return TransferRequest::Follow{g.landing, [&grants = state.grants, id] { return grants.get(id).ok(); }};
}

// A file's size before a job plans its targets around it. A POST with the path in the body: a path of 1,024
// bytes does not fit the request line's limit once percent-encoded.
void install_file_route(Router& r, AgentState& state) {
  r.post("/v1/files/stat", [&state](const Request& req, Response& res) {
    const auto body = read_json_body(state, req, res);
    if (!body) return;
    auto stat = parse_stat_file(*body);
    if (!stat) return send_error(res, stat.error());
    if (out_of_scope(res, req, stat->job_namespace)) return;
    if (auto why = file_refusal(stat->file, stat->job_namespace, state.config.namespace_files))
      return forbid(res, req, *why);
    auto file = state.regions.open_file(stat->file,
                                        file_namespace(stat->job_namespace, state.config.namespace_files));
    if (!file) return send_file_error(res, req, file.error());
    send_json(res, 200, {{"path", stat->file}, {"bytes", file->bytes()}});
  });
}

void install_grant_routes(Router& r, AgentState& state) {
  r.post(kRegionGrants, [&state](const Request& req, Response& res) {
    const auto name = region_name(req, res);
    if (!name) return;
    const auto body = read_json_body(state, req, res);
    if (!body) return;
    auto request = parse_create_grant(*body);
    if (!request) return send_error(res, request.error());
    if (out_of_scope(res, req, request->job_namespace)) return;
    auto region = state.regions.get(*name);
    if (!region) return send_error(res, region.error());
    // The agent checks again what the controller checked: a job reaches only its namespace's regions.
    if (auto why = refusal(**region, request->job_namespace, request->pod)) return forbid(res, req, *why);
    const std::uint64_t size = (*region)->bytes();
    const std::uint64_t length = request->length.value_or(size - std::min(request->offset, size));
    if (request->offset > size || length > size - request->offset || length == 0) {
      return send_error(res, 400, api::wire_code(ErrorCode::InvalidArgument),
                        "range [" + std::to_string(request->offset) + ", +" + std::to_string(length) +
                            ") is outside region " + *name + " (" + std::to_string(size) + " bytes)");
    }
    std::optional<LandingSpec> landing;
    if (request->save) {
      if (auto why = file_refusal(*request->save, request->job_namespace, state.config.namespace_files))
        return forbid(res, req, *why);
      auto save = open_save(state, *request->save, request->job_namespace);
      if (!save) return send_file_error(res, req, save.error());
      landing = LandingSpec{.save = std::move(*save), .writer = request->writer};
    }
    auto grant = state.grants.create(*region, request->offset, length, request->access, request->ttl,
                                     request->provider, std::move(landing), request->writer, request->peer,
                                     request->job_namespace);
    if (!grant) return send_error(res, grant.error());
    if ((*grant)->staging) state.metrics.staged_fallback();  // the target end of a staged GPU transfer
    state.metrics.observe_registration((*grant)->registration_seconds);
    res.set_header("Location", "/v1/grants/" + (*grant)->id);
    send_json(res, 201, (*grant)->to_json());
  });

  // A file target with no region: the writer's bytes pass through a ring of --pipeline-bytes at most.
  r.post("/v1/grants", [&state](const Request& req, Response& res) {
    const auto body = read_json_body(state, req, res);
    if (!body) return;
    auto request = parse_create_ring_grant(*body);
    if (!request) return send_error(res, request.error());
    if (out_of_scope(res, req, request->job_namespace)) return;
    if (auto why = file_refusal(*request->save, request->job_namespace, state.config.namespace_files))
      return forbid(res, req, *why);
    auto save = open_save(state, *request->save, request->job_namespace);
    if (!save) return send_file_error(res, req, save.error());
    const std::uint64_t wanted = std::min(state.config.pipeline_bytes, request->save_bytes);
    const std::uint64_t ring = (wanted + kRingUnit - 1) / kRingUnit * kRingUnit;
    auto memory =
        state.regions.scratch(ring, "the landing ring of a grant saving \"" + *request->save + "\"");
    if (!memory) return send_error(res, memory.error());
    auto grant = state.grants.create(
        *memory, 0, ring, Access::RemoteWrite, request->ttl, request->provider,
        LandingSpec{
            .ring = true, .stream_bytes = request->save_bytes, .save = std::move(*save), .writer = ""},
        "", request->peer, request->job_namespace);
    if (!grant) return send_error(res, grant.error());
    res.set_header("Location", "/v1/grants/" + (*grant)->id);
    send_json(res, 201, (*grant)->to_json());
  });

  r.post(
      kGrantLanded,
      [&state](const Request& req, Response& res) {
        const auto id = path_id(req, res);
        if (!id) return;
        if (auto why = grant_refusal(state, *id)) return forbid(res, req, *why);
        const auto body = read_json_body(state, req, res);
        if (!body) return;
        auto request = parse_landed(*body);
        if (!request) return send_error(res, request.error());
        auto landing = grant_landing(state, *id);
        if (!landing) return send_error(res, landing.error());
        // A report names a range of the grant's stream; an agent's that leaves it asks for what no grant
        // made for it allows (an operator's is a bad request, answered by the landing itself).
        const std::uint64_t stream = (*landing)->stream_bytes();
        if (caller().role == Role::Agent &&
            (request->offset > stream || request->length > stream - request->offset)) {
          return forbid(res, req,
                        "the report's range is outside the grant's " + std::to_string(stream) + " bytes");
        }
        auto report = (*landing)->landed(request->offset, request->length, request->slice, request->crc32c,
                                         request->wait_for_previous);
        if (!report) return send_error(res, report.error());
        count_written(state.metrics, report->written);
        send_json(res, 200,
                  {{"offset", request->offset},
                   {"length", request->length},
                   {"mismatched", report->mismatched},
                   {"saved", report->saved}});
      },
      RouteAccess::Peer);

  r.post(
      kGrantCommit,
      [&state](const Request& req, Response& res) {
        const auto id = path_id(req, res);
        if (!id) return;
        if (auto why = grant_refusal(state, *id)) return forbid(res, req, *why);
        const auto body = read_json_body(state, req, res);
        if (!body) return;
        auto bytes = parse_commit(*body);
        if (!bytes) return send_error(res, bytes.error());
        auto grant = state.grants.get(*id);
        if (!grant) return send_error(res, grant.error());
        auto landing = grant_landing(state, *id);
        if (!landing) return send_error(res, landing.error());
        auto committed = (*landing)->commit(*bytes);
        if (!committed) return send_error(res, committed.error());
        json answer{{"id", *id}, {"landing", (*landing)->to_json()}};
        // Every byte of a write into a region landed: the region has a new version (waiters wake).
        if (const RegionPtr& region = (*grant)->region.get(); region && !(*landing)->ring()) {
          answer["region"] = *committed ? region->bump((*landing)->writer()).to_json(region->name())
                                        : region->update().to_json(region->name());
        }
        send_json(res, 200, answer);
      },
      RouteAccess::Peer);

  r.post(kGrantRenew, [&state](const Request& req, Response& res) {
    const auto id = path_id(req, res);
    if (!id) return;
    const auto body = read_json_body(state, req, res);
    if (!body) return;
    auto ttl = parse_renew_grant(*body);
    if (!ttl) return send_error(res, ttl.error());
    if (auto why = grant_refusal(state, *id)) return forbid(res, req, *why);
    auto grant = state.grants.renew(*id, *ttl);
    if (!grant) return send_error(res, grant.error());
    send_json(res, 200, (*grant)->to_json());
  });

  r.get("/v1/grants", [&state](const Request&, Response& res) {
    json list = json::array();
    // A Control route: the caller is the controller or an operator, so only a tenant's is refused any.
    for (const auto& grant : state.grants.list()) {
      if (!grant_refusal(*grant)) list.push_back(grant->to_json());
    }
    send_json(res, 200, items(std::move(list)));
  });

  r.get(kGrant, [&state](const Request& req, Response& res) {
    const auto id = path_id(req, res);
    if (!id) return;
    if (auto why = grant_refusal(state, *id)) return forbid(res, req, *why);
    auto grant = state.grants.get(*id);
    if (!grant) return send_error(res, grant.error());
    send_json(res, 200, (*grant)->to_json());
  });

  r.del(kGrant,
        [&state](const Request& req, Response& res) {
          const auto id = path_id(req, res);
          if (!id) return;
          const auto ns = held_namespace(req, res);
          if (!ns) return;
          if (auto why = grant_refusal(state, *id)) return forbid(res, req, *why);
          if (auto grant = state.grants.get(*id); grant && !ns->empty() && (*grant)->job_namespace != *ns) {
            return forbid(res, req, "the grant is not made for namespace " + *ns);
          }
          if (auto revoked = state.grants.revoke(*id); !revoked) return send_error(res, revoked.error());
          res.status = 204;
        },
        RouteAccess::Peer, {"namespace"});
}

void install_transfer_routes(Router& r, AgentState& state) {
  r.post("/v1/transfers",
         [&state](const Request& req, Response& res) {
           const auto wait = parse_wait_query(req.params);
           if (!wait) return send_error(res, wait.error());
           const auto body = read_json_body(state, req, res);
           if (!body) return;
           auto request = TransferRequest::from_json(*body);
           if (!request) return send_error(res, request.error());
           if (out_of_scope(res, req, request->job_namespace)) return;
           if (caller().tenant_controller()) request->requested_by = caller().describe();
           if (!request->source_region.empty()) {
             auto source = state.regions.get(request->source_region);
             if (source) {
               if (auto why = refusal(**source, request->job_namespace, request->source_pod)) {
                 return forbid(res, req, *why);
               }
             }
           }
           if (!request->source_file.empty()) {
             if (auto why =
                     file_refusal(request->source_file, request->job_namespace, state.config.namespace_files))
               return forbid(res, req, *why);
           }
           if (caller().role == Role::Agent) {
             // An agent resuming a chain asks a hop to send on what it wrote there. It reaches only the
             // ranges its grants on the region allow, as they allow: sending the range out reads it, op
             // "read" writes into it. Never a file.
             if (request->source_region.empty() || !may_touch_region(state, request->source_region)) {
               return forbid(res, req, "an agent sends on only a region a grant on which is made for it");
             }
             if (agent_out_of_reach(res, req, state, *request)) return;
             // Revoking grants at other agents in this agent's name is for the controller and operators.
             for (const TransferTarget& t : request->targets) {
               if (t.release_grant) return forbid(res, req, "an agent may not ask for releaseGrant");
             }
             request->requested_by = caller().describe();
           }
           if (!request->follow_grant.empty()) {
             auto follow = follow_of(state, *request);
             if (!follow) return send_error(res, follow.error());
             request->follow = std::move(*follow);
           }
           auto id = state.transfers.start(std::move(*request));
           if (!id)
             return send_file_error(res, req, id.error());  // a source file opened beneath its namespace
           res.set_header("Location", "/v1/transfers/" + *id);
           // With ?waitSeconds, the answer is the end when it comes in time (200): one round trip from submit
           // to completion. Otherwise, or once the wait is up, 202 with the status so far.
           std::optional<LongPoll> slot;
           if (wait->count() > 0) slot.emplace(state);
           auto status = slot && *slot
                             ? state.transfers.wait(*id, std::min(*wait, state.config.long_poll_max))
                             : state.transfers.get(*id);
           json answer = status ? status->to_json() : json::object();
           answer["id"] = *id;
           send_json(res, slot && status && ended(status->state) ? 200 : 202, answer);
         },
         RouteAccess::Peer, {"waitSeconds"});

  r.get("/v1/transfers", [&state](const Request&, Response& res) {
    json list = json::array();
    for (const auto& status : state.transfers.list()) {
      if (may_see_transfer(status)) list.push_back(status.to_json());
    }
    send_json(res, 200, items(std::move(list)));
  });

  r.get(kTransfer,
        [&state](const Request& req, Response& res) {
          const auto id = path_id(req, res);
          if (!id) return;
          const auto wait = parse_wait_query(req.params, /*namespace_too=*/true);
          if (!wait) return send_error(res, wait.error());
          const auto ns = held_namespace(req, res);
          if (!ns) return;
          if (!may_see_transfer(state, *id))
            return forbid(res, req, "it sees only the transfers it asked for");
          if (auto why = transfer_not_of(state, *id, *ns)) return forbid(res, req, *why);
          std::optional<LongPoll> slot;
          if (wait->count() > 0) {
            slot.emplace(state);
            if (!*slot) return slot->refuse(res);
          }
          auto status = slot ? state.transfers.wait(*id, std::min(*wait, state.config.long_poll_max))
                             : state.transfers.get(*id);
          if (!status) return send_error(res, status.error());
          send_json(res, 200, status->to_json());
        },
        RouteAccess::Peer, {"waitSeconds", "namespace"});

  r.del(kTransfer,
        [&state](const Request& req, Response& res) {
          const auto id = path_id(req, res);
          if (!id) return;
          const auto ns = held_namespace(req, res);
          if (!ns) return;
          if (!may_see_transfer(state, *id)) {
            return forbid(res, req, "it cancels only the transfers it asked for");
          }
          if (auto why = transfer_not_of(state, *id, *ns)) return forbid(res, req, *why);
          if (auto cancelled = state.transfers.cancel(*id); !cancelled)
            return send_error(res, cancelled.error());
          auto status = state.transfers.get(*id);
          if (!status) return send_error(res, status.error());
          send_json(res, 202, status->to_json());
        },
        RouteAccess::Peer, {"namespace"});
}

}  // namespace

void install_routes(httplib::Server& server, AgentState& state) {
  server.set_payload_max_length(state.config.max_body_bytes);
  // Before routing, so a route added later cannot forget to check the token.
  server.set_pre_routing_handler([&state](const Request& req, Response& res) {
    const auto authorized = authorize(state, req, res);
    return authorized == HandlerResponse::Handled ? authorized : refuse_unbounded_body(req, res);
  });

  Router router(server);
  install_health_routes(router, state);
  install_region_routes(router, state);
  install_grant_routes(router, state);
  install_file_route(router, state);
  install_staging_route(router, state);
  install_transfer_routes(router, state);

  server.set_error_handler(
      httplib::Server::HandlerWithResponse([routes = router.routes()](const Request& req, Response& res) {
        return fill_error(*routes, req, res);
      }));
  // The handlers catch their own exceptions; this covers the pre-routing and error handlers.
  server.set_exception_handler([](const Request& req, Response& res, std::exception_ptr error) {
    std::string what = "unknown exception";
    try {
      if (error) std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log::error("unhandled exception in request",
               {{"method", req.method}, {"path", req.path}, {"what", what}});
    send_error(res, 500, api::code::kInternal, "internal error");
  });
}

}  // namespace conduit::agent
