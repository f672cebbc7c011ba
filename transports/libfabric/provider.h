// Provider names as users write them ("tcp", "shm", "efa", "verbs", "auto") mapped to libfabric's filter
// strings, and the fi_getinfo query for one-sided RMA on reliable datagram endpoints.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "conduit/common/result.h"
#include "fi_handles.h"

namespace conduit::fabric {

// "tcp" -> "tcp;ofi_rxm", "verbs" -> "verbs;ofi_rxm", full names pass through. NotFound for anything else.
Result<std::string> canonical_provider(std::string_view name);

// Providers "auto" tries, best first. shm is absent on purpose: it reaches only this node.
std::span<const std::string_view> auto_providers();

// The NIC a domain of `provider` sits on, by its /sys/class/infiniband name: efa names domains after the
// device plus the endpoint type ("rdmap16s27-rdm"), verbs after the device ("mlx5_0", "mlx5_0-xrc"). ""
// for providers whose rails share one interface (tcp, shm): there is no NIC to tell apart.
std::string nic_of_domain(std::string_view provider, std::string_view domain_name);

// fi_getinfo for FI_EP_RDM + FI_RMA on `provider` (canonical name), bound to `bind_address` when set, and
// with FI_HMEM (device memory) when `hmem`. Unavailable (with fi_strerror text) when the provider is not
// present or offers no such endpoint.
Result<InfoPtr> query_provider(const std::string& provider, const std::string& bind_address,
                               bool hmem = false);

}  // namespace conduit::fabric
