// One request as its route's handler sees it. The router fills it in before the handler runs (rest/router.h):
// who calls, the path's {name} or {id} checked, and the namespace the request is held to, so a handler starts
// at what is its own. Each step below answers the request itself when it fails and says so (nullopt, or
// true for a refusal), so a handler reads as its list of steps: `if (!x) return;`.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "conduit/common/result.h"
#include "regions.h"
#include "rest/body.h"
#include "rest/identity.h"
#include "rest/rest.h"

namespace conduit::agent::rest {

struct Call {
  AgentState& state;
  const Caller& caller;
  const httplib::Request& req;
  httplib::Response& res;
  std::string name;  // the path's {name}: a valid region name ("" where the path has none)
  std::string id;    // the path's {id}: a valid grant or transfer id ("" where the path has none)
  // The namespace a request on one region, grant or transfer (its DELETE, a transfer's GET) is held to ("" =
  // none), on routes that take ?namespace=. A tenant's controller is held to its own. The cluster's
  // controller names the job's when it looks at or releases what a job's run record lists: whoever may edit
  // the TransferJob may write that record, so the agent, not the record, decides that the object is that
  // namespace's.
  std::string ns;

  void reply(int status, const nlohmann::json& body) const;
  void fail(const Error& error) const;
  // A file's error: one that leads out of the job's namespace's directory is refused (403), as forbid().
  void fail_file(const Error& error) const;
  // 403: the caller may not make this request; `what` says which part of it, when it is not the route.
  void forbid(const std::string& what = "") const;
  // forbid(*why) and true when there is a why (rest/access.h).
  bool denied(const std::optional<std::string>& why) const;
  // 403 and true unless the caller may act for namespace `job_ns`: a tenant's controller acts for its own
  // alone (Caller::namespace_refusal).
  bool out_of_scope(const std::string& job_ns) const;
  // 403 and true when a job of namespace `job_ns` may not read or write `file` (tenancy.h, file_refusal).
  bool file_out_of_reach(const std::string& file, const std::string& job_ns) const;
  // The namespace whose directory a job's file is opened beneath (tenancy.h, file_namespace).
  std::string files_of(const std::string& job_ns) const;

  // The body read (rest/body.h) and parsed by `parse` (an api/ body's strict from_json), or nullopt after
  // answering.
  template <class T>
  std::optional<T> body(Result<T> (*parse)(const nlohmann::json&)) const {
    const auto json = read_json_body(state.config.max_body_bytes, req, res);
    if (!json) return std::nullopt;
    auto parsed = parse(*json);
    if (!parsed) {
      fail(parsed.error());
      return std::nullopt;
    }
    return std::move(*parsed);
  }

  // Region {name} where the caller may see it (or, with `changes`, change it), or nullopt after answering
  // 404 or 403.
  std::optional<RegionPtr> region(bool changes = false) const;
};

}  // namespace conduit::agent::rest
