#include "provider.h"

#include <rdma/fabric.h>

#include <array>
#include <cstring>

#include "mr_mode.h"

namespace conduit::fabric {

namespace {

constexpr std::array<std::string_view, 3> kAuto{"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};

struct Alias {
  std::string_view name;
  std::string_view provider;
};
constexpr std::array<Alias, 7> kAliases{{
    {"tcp", "tcp;ofi_rxm"},
    {"tcp;ofi_rxm", "tcp;ofi_rxm"},
    {"shm", "shm"},
    {"efa", "efa"},
    {"verbs", "verbs;ofi_rxm"},
    {"verbs;ofi_rxm", "verbs;ofi_rxm"},
    {"auto", "auto"},
}};

}  // namespace

std::span<const std::string_view> auto_providers() { return kAuto; }

std::string nic_of_domain(std::string_view provider, std::string_view domain_name) {
  if (provider != "efa" && provider != "verbs;ofi_rxm") return {};
  for (std::string_view suffix : {"-rdm", "-dgrm", "-xrc"}) {
    if (domain_name.size() > suffix.size() && domain_name.ends_with(suffix)) {
      domain_name.remove_suffix(suffix.size());
      break;
    }
  }
  return std::string(domain_name);
}

Result<std::string> canonical_provider(std::string_view name) {
  for (const Alias& a : kAliases) {
    if (a.name == name) return std::string(a.provider);
  }
  return make_error(ErrorCode::NotFound,
                    "unknown provider \"" + std::string(name) + "\" (known: tcp, shm, efa, verbs, auto)");
}

Result<InfoPtr> query_provider(const std::string& provider, const std::string& bind_address, bool hmem) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return make_error(ErrorCode::Provider, "fi_allocinfo failed");
  hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  if (hmem) hints->caps |= FI_HMEM;
  hints->ep_attr->type = FI_EP_RDM;
  // We hand every op a struct fi_context2 (the first member of our slice record), so both modes are fine.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = static_cast<int>(supported_mr_mode_bits());
  // Registration happens on caller threads while each rail's progress thread drives its endpoint.
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->fabric_attr->prov_name = strdup(provider.c_str());  // freed by fi_freeinfo

  fi_info* info = nullptr;
  // shm takes the node string as the name of its shared-memory segment, so "127.0.0.1" in two processes
  // collides (fi_enable: EBUSY); it has no interface to bind anyway.
  const bool binds = !bind_address.empty() && provider != "shm";
  const char* node = binds ? bind_address.c_str() : nullptr;
  const std::uint64_t flags = node != nullptr ? FI_SOURCE : 0;
  const int rc = fi_getinfo(FI_VERSION(1, 17), node, nullptr, flags, hints.get(), &info);
  if (rc != 0 || info == nullptr) {
    std::string where = binds ? " bound to " + bind_address : "";
    return make_error(ErrorCode::Unavailable, "provider " + provider + " is not available on this machine" +
                                                  where + (hmem ? " with FI_HMEM" : "") +
                                                  ": fi_getinfo: " + fi_strerror(-rc));
  }
  return InfoPtr(info);
}

}  // namespace conduit::fabric
