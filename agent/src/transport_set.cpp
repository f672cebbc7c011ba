#include "transport_set.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "conduit/common/text.h"
#include "conduit/cuda_device.h"
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

Result<TransportSet> TransportSet::open(const std::vector<std::string>& providers,
                                        const TransportConfig& each) {
  if (providers.empty()) return make_error(ErrorCode::InvalidArgument, "no fabric provider asked for");
  TransportSet set;
  std::string failures;
  for (const std::string& provider : providers) {
    TransportConfig config = each;
    config.provider = provider;
    auto transport = open_transport(config);
    if (!transport) {
      failures += (failures.empty() ? "" : "; ") + provider + ": " + transport.error().message;
      continue;
    }
    // "auto" and an explicit name may land on the same provider: a second endpoint of it would only
    // split the same NICs and make find() ambiguous.
    if (set.find((*transport)->capabilities().provider) != nullptr) continue;
    set.transports_.push_back(std::move(*transport));
  }
  if (set.transports_.empty()) {
    return make_error(ErrorCode::Unavailable, "no fabric provider could be opened: " + failures);
  }
  return set;
}

Transport* TransportSet::find(std::string_view provider) const {
  for (const auto& t : transports_) {
    if (provider_matches(t->capabilities().provider, provider)) return t.get();
  }
  return nullptr;
}

nlohmann::json TransportSet::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : transports_) {
    const Capabilities& caps = t->capabilities();
    const std::vector<std::byte> address = t->address();
    out.push_back({{"provider", caps.provider},
                   {"name", std::string(t->name())},
                   {"rails", t->rails()},
                   {"railNics", caps.rail_nics},
                   {"address", to_hex(address)},
                   {"mrMode", caps.mr_mode_text},
                   {"orderedWaw", caps.ordered_waw},
                   {"deviceMemory", caps.device_memory}});
  }
  return out;
}

MemoryPlace place_of(const MemoryRegion& memory) {
  MemoryPlace place;
  if (memory.kind() == MemoryKind::Cuda) {
    const auto& devices = cuda::availability().devices;
    if (memory.device() >= 0 && static_cast<std::size_t>(memory.device()) < devices.size()) {
      // sysfs writes PCI addresses in lower case; the driver's may not be.
      place.gpu_pci = to_lower(devices[static_cast<std::size_t>(memory.device())].pci_bus_id);
    }
    return place;
  }
  if (memory.data() == nullptr) return place;
  // move_pages with no target nodes only reports where each page is; the raw syscall avoids a libnuma
  // dependency for this one question.
  void* page = memory.data();
  int status = -1;
  if (::syscall(SYS_move_pages, 0, 1UL, &page, nullptr, &status, 0) == 0 && status >= 0) {
    place.numa_node = status;
  }
  return place;
}

void TransportSet::set_rail_policy(std::optional<Topology> topology, RailPolicy policy) {
  topology_ = std::move(topology);
  policy_ = policy;
}

RailChoice TransportSet::rails_for(const Transport& transport, const MemoryRegion& memory) const {
  std::vector<std::string> nics = transport.capabilities().rail_nics;
  // tcp and shm name no NIC: every rail is on the one interface (choose_rails says so).
  if (nics.empty()) nics.resize(static_cast<std::size_t>(transport.rails()));
  const Result<NicChoice> ranked =
      topology_ ? choose_nics(*topology_, place_of(memory), {"infiniband", /*best_class_only=*/false})
                : Result<NicChoice>(make_error(ErrorCode::Unavailable, "the node's topology is unknown"));
  return choose_rails(nics, ranked, policy_);
}

nlohmann::json TransportSet::rails_json(const MemoryRegion& memory) const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : transports_) {
    const RailChoice c = rails_for(*t, memory);
    out.push_back(
        {{"provider", t->capabilities().provider}, {"rails", c.rails}, {"nics", c.nics}, {"why", c.why}});
  }
  return out;
}

}  // namespace conduit::agent
