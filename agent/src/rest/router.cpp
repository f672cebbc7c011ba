#include "rest/router.h"

#include <algorithm>
#include <exception>
#include <optional>

#include "conduit/api/errors.h"
#include "conduit/api/names.h"
#include "conduit/common/log.h"
#include "rest/auth.h"
#include "rest/reply.h"
#include "rest/requests.h"

namespace conduit::agent::rest {
namespace {

using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

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

// 400 for a query parameter the route does not take; false after answering.
bool query_taken(const Router::Query& query, const std::string& what, const Request& req, Response& res) {
  for (const auto& [key, value] : query_of(req)) {
    if (std::find(query.begin(), query.end(), key) != query.end()) continue;
    std::string takes;
    for (const auto& name : query) takes += (takes.empty() ? "" : ", ") + name;
    send_error(res, 400, api::wire_code(ErrorCode::InvalidArgument),
               "unknown query parameter \"" + key + "\": " + what +
                   (takes.empty() ? " takes none" : " takes " + takes));
    return false;
  }
  return true;
}

// Call::ns: a tenant's controller's own namespace, else ?namespace= when given; false after answering 400.
bool hold_namespace(Call& call) {
  if (call.caller.tenant_controller()) {
    call.ns = call.caller.ns;
    return true;
  }
  if (!call.req.has_param("namespace")) return true;
  if (call.req.get_param_value_count("namespace") > 1) {
    call.fail(make_error(ErrorCode::InvalidArgument, "query parameter \"namespace\" given more than once"));
    return false;
  }
  call.ns = call.req.get_param_value("namespace");
  if (!api::valid_namespace(call.ns)) {
    call.fail(
        make_error(ErrorCode::InvalidArgument, "namespace: must be a namespace name (a DNS-1123 label)"));
    return false;
  }
  return true;
}

// The preamble every route shares, in one place: the path's one placeholder checked ({name}: a region name,
// {id}: a grant or transfer id), then the namespace the request is held to where the route takes one.
bool prepare(Call& call, std::string_view path_template, bool takes_namespace) {
  if (call.req.matches.size() > 1) {
    const bool is_name = path_template.find("{name}") != std::string_view::npos;
    std::string& field = is_name ? call.name : call.id;
    field = call.req.matches[1];
    if (auto valid = is_name ? api::validate_name(field) : validate_id(field); !valid) {
      call.fail(valid.error());
      return false;
    }
  }
  return !takes_namespace || hold_namespace(call);
}

void log_unhandled(const Request& req, const char* what) {
  if (what == nullptr) {
    log::error("unhandled exception in request", {{"method", req.method}, {"path", req.path}});
  } else {
    log::error("unhandled exception in request",
               {{"method", req.method}, {"path", req.path}, {"what", what}});
  }
}

// The methods served on `path`, as an Allow header lists them; empty when no route matches the path.
template <class Routes>
std::string allowed_methods(const Routes& routes, const std::string& path) {
  std::string allow;
  for (const auto& route : routes) {
    if (fits_template(route.path_template, path) && allow.find(route.method) == std::string::npos) {
      allow += (allow.empty() ? "" : ", ") + route.method;
    }
  }
  return allow;
}

// Responses our handlers made already carry a body and pass through untouched.
template <class Routes>
HandlerResponse fill_error(const Routes& routes, const Request& req, Response& res) {
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

}  // namespace

Router::Router(httplib::Server& server, AgentState& state)
    : server_(server), state_(state), routes_(std::make_shared<std::vector<Route>>()) {}

void Router::get(const std::string& path_template, Handler h, RouteAccess access, Query query) {
  add("GET", path_template, std::move(h), access, std::move(query));
}
void Router::post(const std::string& path_template, Handler h, RouteAccess access, Query query) {
  add("POST", path_template, std::move(h), access, std::move(query));
}
void Router::del(const std::string& path_template, Handler h, RouteAccess access, Query query) {
  add("DELETE", path_template, std::move(h), access, std::move(query));
}
void Router::put(const std::string& path_template, Handler h, RouteAccess access, Query query) {
  add("PUT", path_template, std::move(h), access, std::move(query));
}

void Router::add(const std::string& method, const std::string& path_template, Handler handler,
                 RouteAccess access, Query query) {
  routes_->push_back({method, path_template});
  const bool takes_namespace = std::find(query.begin(), query.end(), "namespace") != query.end();
  auto guarded = [&state = state_, handler = std::move(handler), access, query = std::move(query),
                  takes_namespace, path_template,
                  what = method + " " + path_template](const Request& req, Response& res) {
    Call call{state, caller(), req, res, {}, {}, {}};
    if (access != RouteAccess::Public && !admits(access, call.caller)) return call.forbid();
    if (!query_taken(query, what, req, res)) return;
    try {
      if (prepare(call, path_template, takes_namespace)) handler(call);
    } catch (const std::exception& e) {
      log_unhandled(req, e.what());
      send_error(res, 500, api::code::kInternal, "internal error");
    } catch (...) {
      log_unhandled(req, nullptr);
      send_error(res, 500, api::code::kInternal, "internal error");
    }
  };
  const std::string pattern = to_httplib_pattern(path_template);
  if (method == "GET") server_.Get(pattern, std::move(guarded));
  if (method == "POST") server_.Post(pattern, std::move(guarded));
  if (method == "DELETE") server_.Delete(pattern, std::move(guarded));
  if (method == "PUT") server_.Put(pattern, std::move(guarded));
}

void Router::install_error_handlers() {
  server_.set_error_handler(httplib::Server::HandlerWithResponse(
      [routes = routes_](const Request& req, Response& res) { return fill_error(*routes, req, res); }));
  // The handlers catch their own exceptions; this covers the pre-routing and error handlers.
  server_.set_exception_handler([](const Request& req, Response& res, std::exception_ptr error) {
    std::string what = "unknown exception";
    try {
      if (error) std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log_unhandled(req, what.c_str());
    send_error(res, 500, api::code::kInternal, "internal error");
  });
}

}  // namespace conduit::agent::rest
