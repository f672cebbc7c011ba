#include "rest/access.h"

namespace conduit::agent::rest {

std::optional<std::string> grant_refusal(const Caller& caller, const Grant& grant) {
  if (caller.tenant_controller()) {
    if (grant.job_namespace == caller.ns) return std::nullopt;
    return "the grant is not made for its namespace";
  }
  if (caller.acts_for(grant.peer)) return std::nullopt;
  return "the grant is made for another node";
}

std::optional<std::string> grant_refusal(const Caller& caller, const GrantTable& grants,
                                         const std::string& id) {
  auto grant = grants.get(id);
  return grant ? grant_refusal(caller, **grant) : std::nullopt;
}

bool may_touch_region(const Caller& caller, const GrantTable& grants, const std::string& name) {
  if (caller.role != Role::Agent) return true;
  for (const auto& grant : grants.list()) {
    const RegionPtr& region = grant->region.get();
    if (region && region->name() == name && caller.acts_for(grant->peer)) return true;
  }
  return false;
}

bool may_read_region(const Caller& caller, const Region& region) {
  return !caller.tenant_controller() || region.tenancy().admits(caller.ns);
}

std::optional<std::string> region_refusal(const Caller& caller, const Region& region, bool changes) {
  if (!caller.tenant_controller()) return std::nullopt;
  if (changes ? region.tenancy().ns == caller.ns : may_read_region(caller, region)) return std::nullopt;
  return "region " + region.name() + " is not of its namespace";
}

bool may_see_transfer(const Caller& caller, const TransferStatus& status) {
  if (caller.role != Role::Agent && !caller.tenant_controller()) return true;
  return status.requested_by == caller.describe();
}

bool may_see_transfer(const Caller& caller, const TransferManager& transfers, const std::string& id) {
  auto status = transfers.get(id);
  return !status || may_see_transfer(caller, *status);
}

std::optional<std::string> transfer_namespace_refusal(const TransferManager& transfers, const std::string& id,
                                                      const std::string& ns) {
  auto status = transfers.get(id);
  if (!status || ns.empty() || status->job_namespace == ns) return std::nullopt;
  return "the transfer is not made for namespace " + ns;
}

}  // namespace conduit::agent::rest
