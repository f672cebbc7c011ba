#include "identity.h"

namespace conduit::agent {

std::string Caller::describe() const {
  switch (role) {
    case Role::Controller:
      return "the controller";
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

std::optional<Caller> caller_from_certificate(std::string_view common_name) {
  constexpr std::string_view kAgent = "conduit:agent:";
  if (common_name == "conduit:controller") return Caller{Role::Controller, {}};
  if (common_name == "conduit:operator") return Caller{Role::Operator, {}};
  if (common_name == "conduit:agent") return Caller{Role::Agent, {}};
  if (common_name.starts_with(kAgent) && common_name.size() > kAgent.size()) {
    return Caller{Role::Agent, std::string(common_name.substr(kAgent.size()))};
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

}  // namespace conduit::agent
