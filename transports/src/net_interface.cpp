#include "conduit/net_interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace conduit {

std::string numeric_host(const void* address, std::size_t length) {
  if (address == nullptr || length < sizeof(sa_family_t)) return {};
  sockaddr_storage storage{};
  std::memcpy(&storage, address, std::min(length, sizeof storage));
  char text[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET && length >= sizeof(sockaddr_in)) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) return text;
  } else if (storage.ss_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    if (::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text) != nullptr) return text;
  }
  return {};
}

Result<std::string> interface_with_address(const std::string& ip) {
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = ::inet_pton(AF_INET, ip.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && ::inet_pton(AF_INET6, ip.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return make_error(ErrorCode::InvalidArgument, "\"" + ip + "\" is not an IP address");
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    return make_error(ErrorCode::Unavailable, std::string("getifaddrs: ") + std::strerror(errno));
  }
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owned(list, &::freeifaddrs);
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_name == nullptr) continue;
    if (is_v4 && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == v4.s_addr) {
      return std::string(i->ifa_name);
    }
    if (is_v6 && i->ifa_addr->sa_family == AF_INET6 &&
        std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, &v6, sizeof v6) == 0) {
      return std::string(i->ifa_name);
    }
  }
  return make_error(ErrorCode::NotFound, "no interface holds " + ip);
}

std::vector<std::string> interfaces_with_an_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owned(list, &::freeifaddrs);
  std::vector<std::string> out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_name == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET6) {
      // Every interface with IPv6 on has a link-local address (a pod's host-side veth too): not one a rail
      // or a route to a peer would use.
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
    } else if (i->ifa_addr->sa_family != AF_INET) {
      continue;
    }
    out.emplace_back(i->ifa_name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace conduit
