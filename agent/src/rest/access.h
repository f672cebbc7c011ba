// What a caller (rest/identity.h) may do with the grants, regions and transfers it names: the decisions
// every route makes after the route's own RouteAccess let the caller in. Each answers why not, or nullopt;
// the handler turns a why into a 403 (Call::denied). Namespaces of regions and files are tenancy.h's; the
// ranges an agent reaches through its grants are rest/peer_access.h's.
#pragma once

#include <optional>
#include <string>

#include "grants.h"
#include "regions.h"
#include "rest/identity.h"
#include "transfer/manager.h"

namespace conduit::agent::rest {

// An agent acts only on the grants made for it, a tenant's controller only on those made for its namespace.
std::optional<std::string> grant_refusal(const Caller& caller, const Grant& grant);
// The same for grant `id`. An unknown grant passes, so the handler answers NotFound as for anyone.
std::optional<std::string> grant_refusal(const Caller& caller, const GrantTable& grants,
                                         const std::string& id);

// Whether `caller` may read region `name` (checksums, staging copies, sending it on): an agent only while a
// grant on the region is made for it, that is while a transfer between the two is under way.
bool may_touch_region(const Caller& caller, const GrantTable& grants, const std::string& name);

// What exists: a tenant's controller reads the regions its namespace may use (its own, those shared with
// it, those of no namespace) and changes only its own.
bool may_read_region(const Caller& caller, const Region& region);
std::optional<std::string> region_refusal(const Caller& caller, const Region& region, bool changes);

// Whether the caller may look at or cancel a transfer: anyone but an agent or a tenant's controller, or the
// one that asked for it (ResolvedRequest::requested_by).
bool may_see_transfer(const Caller& caller, const TransferStatus& status);
// The same for transfer `id`. An unknown transfer passes, so the handler answers NotFound as for anyone.
bool may_see_transfer(const Caller& caller, const TransferManager& transfers, const std::string& id);
// Why transfer `id` is out of reach of a request held to namespace `ns` (Call::ns), or nullopt. An unknown
// transfer passes.
std::optional<std::string> transfer_namespace_refusal(const TransferManager& transfers, const std::string& id,
                                                      const std::string& ns);

}  // namespace conduit::agent::rest
