#include "rest/identity.h"

#include "conduit/api/names.h"
#include "regions.h"

namespace conduit::agent::rest {

std::string Caller::describe() const {
  switch (role) {
    case Role::Controller:
      return ns.empty() ? "the controller" : "the controller of namespace \"" + ns + "\"";
    case Role::Operator:
      return "an operator";
    case Role::Agent:
      return node.empty() ? "an agent" : "the agent of node \"" + node + "\"";
  }
  return "an unknown caller";
}

bool Caller::acts_for(const std::string& peer) const {
  if (role != Role::Agent) return true;
  return node.empty() || peer.empty() || node == peer;
}

std::optional<std::string> Caller::namespace_refusal(const std::string& job_ns) const {
  if (!tenant_controller() || job_ns == ns) return std::nullopt;
  if (job_ns.empty()) return describe() + " acts only for its namespace, and this request names none";
  return describe() + " may not act for namespace \"" + job_ns + "\"";
}

std::optional<Caller> caller_from_certificate(std::string_view common_name) {
  constexpr std::string_view kAgent = "conduit:agent:";
  constexpr std::string_view kTenantController = "conduit:controller:";
  if (common_name == "conduit:controller") return Caller{Role::Controller, {}, {}};
  if (common_name == "conduit:operator") return Caller{Role::Operator, {}, {}};
  if (common_name == "conduit:agent") return Caller{Role::Agent, {}, {}};
  if (common_name.starts_with(kAgent) && common_name.size() > kAgent.size()) {
    return Caller{Role::Agent, std::string(common_name.substr(kAgent.size())), {}};
  }
  if (common_name.starts_with(kTenantController)) {
    std::string ns(common_name.substr(kTenantController.size()));
    // A name that is not a namespace names nobody (refused with 403), never every namespace.
    if (api::validate_name(ns)) return Caller{Role::Controller, {}, std::move(ns)};
  }
  return std::nullopt;
}

bool admits(RouteAccess access, const Caller& caller) {
  switch (access) {
    case RouteAccess::Public:
    case RouteAccess::Peer:
      return true;
    case RouteAccess::Control:
      return caller.role != Role::Agent;
  }
  return false;
}

}  // namespace conduit::agent::rest
