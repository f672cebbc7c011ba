// Routes on cpp-httplib, each declared with what it lets in (rest/identity.h) and the query parameters it
// takes. Before a handler runs, the router checks both, then the request's preamble every route shares: the
// path's {name} or {id}, and the namespace a request is held to (rest/call.h); any failure answers there.
// Afterwards, every response httplib makes by itself (no such route, no such method, a body too large) gets
// the JSON error body too.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rest/call.h"
#include "rest/identity.h"
#include "rest/rest.h"

namespace conduit::agent::rest {

class Router {
 public:
  using Handler = std::function<void(Call&)>;
  // The query parameters a route takes; any other is refused with 400 before its handler runs, so a
  // parameter a route does not read (?namespace= where nothing is scoped by it) never passes for applied.
  using Query = std::vector<std::string>;

  Router(httplib::Server& server, AgentState& state);

  // Every route says who it lets in; Control unless said otherwise.
  void get(const std::string& path_template, Handler h, RouteAccess access = RouteAccess::Control,
           Query query = {});
  void post(const std::string& path_template, Handler h, RouteAccess access = RouteAccess::Control,
            Query query = {});
  void del(const std::string& path_template, Handler h, RouteAccess access = RouteAccess::Control,
           Query query = {});
  void put(const std::string& path_template, Handler h, RouteAccess access = RouteAccess::Control,
           Query query = {});

  // Gives the responses httplib makes by itself the JSON error body, telling "no such route" (404) from "no
  // such method on this route" (405) by the routes added so far.
  void install_error_handlers();

 private:
  struct Route {
    std::string method;
    std::string path_template;
  };

  void add(const std::string& method, const std::string& path_template, Handler handler, RouteAccess access,
           Query query);

  httplib::Server& server_;
  AgentState& state_;
  std::shared_ptr<std::vector<Route>> routes_;
};

}  // namespace conduit::agent::rest
