#include "path/rail_nics.h"

#include "conduit/net_interface.h"

namespace conduit::agent::path {

RailNics rail_nics(const Transport& transport) {
  const Capabilities& caps = transport.capabilities();
  const auto rails = static_cast<std::size_t>(transport.rails());
  RailNics out;
  out.per_rail.resize(rails);
  if (!caps.rail_nics.empty()) {
    for (std::size_t r = 0; r < rails && r < caps.rail_nics.size(); ++r) {
      if (!caps.rail_nics[r].empty()) out.per_rail[r] = NicRef{caps.rail_nics[r], NicClass::Infiniband};
    }
    return out;
  }
  if (caps.rail_addresses.empty()) {
    out.why_none = "the " + caps.provider +
                   " rails name no NIC and no address (shm moves bytes through "
                   "this node's memory)";
    return out;
  }
  for (std::size_t r = 0; r < rails && r < caps.rail_addresses.size(); ++r) {
    auto name = interface_with_address(caps.rail_addresses[r]);
    if (name) {
      out.per_rail[r] = NicRef{*name, NicClass::Net};
    } else if (out.why_none.empty()) {
      out.why_none = "rail " + std::to_string(r) + " is bound to " + caps.rail_addresses[r] + ": " +
                     name.error().message;
    }
  }
  return out;
}

void add_planned(std::vector<Planned>& into, const RailNics& nics, const std::vector<std::uint32_t>& used,
                 std::uint64_t bytes) {
  auto entry = [&into](const NicRef& nic) -> Planned& {
    for (Planned& p : into) {
      if (p.nic == nic) return p;
    }
    return into.emplace_back(Planned{nic, 0});
  };
  std::vector<std::uint32_t> rails = used;
  if (rails.empty()) {
    for (std::uint32_t r = 0; r < nics.per_rail.size(); ++r) rails.push_back(r);
  }
  std::vector<const NicRef*> carrying;  // one per used rail that has a NIC
  for (std::uint32_t r : rails) {
    if (r < nics.per_rail.size() && nics.per_rail[r]) carrying.push_back(&*nics.per_rail[r]);
  }
  for (const auto& nic : nics.per_rail) {
    if (nic) entry(*nic);
  }
  if (carrying.empty()) return;
  // Whole shares, the remainder on the first rails: the sums add up to `bytes` exactly.
  const std::uint64_t share = bytes / carrying.size();
  std::uint64_t rest = bytes % carrying.size();
  for (const NicRef* nic : carrying) {
    entry(*nic).bytes += share + (rest > 0 ? 1 : 0);
    if (rest > 0) --rest;
  }
}

}  // namespace conduit::agent::path
