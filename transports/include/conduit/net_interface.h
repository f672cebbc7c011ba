// Which network interface holds a local IP address (getifaddrs): how a tcp rail, which names no NIC, is
// tied to the interface whose counters show its bytes (conduit/nic_counters.h).
#pragma once

#include <sys/socket.h>

#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit {

// "lo" for 127.0.0.1, "eth0" for the address eth0 holds. NotFound when no interface holds `ip` (the
// wildcard 0.0.0.0 included: a rail bound to it has no one interface); InvalidArgument when `ip` is not a
// numeric IPv4 or IPv6 address.
Result<std::string> interface_with_address(const std::string& ip);

// The interfaces that hold an IPv4 address or an IPv6 one that is not link-local (sorted, each once): lo
// included. Empty when getifaddrs fails.
std::vector<std::string> interfaces_with_an_address();

// The numeric host of a socket address (AF_INET / AF_INET6), as a provider's fi_getname gives it; "" for
// any other family or a short buffer.
std::string numeric_host(const void* address, std::size_t length);

}  // namespace conduit
