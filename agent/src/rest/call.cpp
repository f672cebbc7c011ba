#include "rest/call.h"

#include "conduit/api/errors.h"
#include "rest/access.h"
#include "rest/reply.h"
#include "tenancy.h"

namespace conduit::agent::rest {

void Call::reply(int status, const nlohmann::json& body) const { send_json(res, status, body); }

void Call::fail(const Error& error) const { send_error(res, error); }

void Call::fail_file(const Error& error) const {
  if (error.code == ErrorCode::Forbidden) return forbid(error.message);
  fail(error);
}

void Call::forbid(const std::string& what) const {
  send_error(
      res, 403, api::code::kForbidden,
      caller.describe() + " may not " + req.method + " " + req.path + (what.empty() ? "" : ": " + what));
}

bool Call::denied(const std::optional<std::string>& why) const {
  if (why) forbid(*why);
  return why.has_value();
}

bool Call::out_of_scope(const std::string& job_ns) const {
  auto why = caller.namespace_refusal(job_ns);
  if (why) send_error(res, 403, api::code::kForbidden, *why + " (" + req.method + " " + req.path + ")");
  return why.has_value();
}

bool Call::file_out_of_reach(const std::string& file, const std::string& job_ns) const {
  return denied(file_refusal(file, job_ns, state.config.namespace_files));
}

std::string Call::files_of(const std::string& job_ns) const {
  return file_namespace(job_ns, state.config.namespace_files);
}

std::optional<RegionPtr> Call::region(bool changes) const {
  auto region = state.regions.get(name);
  if (!region) {
    fail(region.error());
    return std::nullopt;
  }
  if (denied(region_refusal(caller, **region, changes))) return std::nullopt;
  return std::move(*region);
}

}  // namespace conduit::agent::rest
