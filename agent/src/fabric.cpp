#include "fabric.h"

#include "conduit/remote_key.h"

namespace conduit::agent {

namespace {

// Users write "tcp" or "verbs"; libfabric reports the layered "tcp;ofi_rxm". An alias names the core
// provider under the utility layer, so matching the part before ';' covers every layered form.
bool provider_matches(std::string_view opened, std::string_view asked) {
  if (opened == asked) return true;
  return opened.size() > asked.size() && opened.starts_with(asked) && opened[asked.size()] == ';';
}

}  // namespace

Result<Fabric> Fabric::open(const std::vector<std::string>& providers, int rails,
                            const std::string& bind_address, std::chrono::milliseconds stall_timeout) {
  if (providers.empty()) return make_error(ErrorCode::InvalidArgument, "no fabric provider asked for");
  Fabric fabric;
  std::string failures;
  for (const std::string& provider : providers) {
    auto transport = open_transport(TransportConfig{provider, rails, bind_address, stall_timeout});
    if (!transport) {
      failures += (failures.empty() ? "" : "; ") + provider + ": " + transport.error().message;
      continue;
    }
    // "auto" and an explicit name may land on the same provider: a second endpoint of it would only
    // split the same NICs and make find() ambiguous.
    if (fabric.find((*transport)->capabilities().provider) != nullptr) continue;
    fabric.transports_.push_back(std::move(*transport));
  }
  if (fabric.transports_.empty()) {
    return make_error(ErrorCode::Unavailable, "no fabric provider could be opened: " + failures);
  }
  return fabric;
}

Transport* Fabric::find(std::string_view provider) const {
  for (const auto& t : transports_) {
    if (provider_matches(t->capabilities().provider, provider)) return t.get();
  }
  return nullptr;
}

nlohmann::json Fabric::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : transports_) {
    const Capabilities& caps = t->capabilities();
    const std::vector<std::byte> address = t->address();
    out.push_back({{"provider", caps.provider},
                   {"name", std::string(t->name())},
                   {"rails", t->rails()},
                   {"address", to_hex(address)},
                   {"mrMode", caps.mr_mode_text},
                   {"orderedWaw", caps.ordered_waw},
                   {"deviceMemory", caps.device_memory}});
  }
  return out;
}

}  // namespace conduit::agent
