#include "conduit/rail_choice.h"

#include <algorithm>
#include <optional>

#include "conduit/common/text.h"

namespace conduit {

namespace {

void add_unique(std::vector<std::string>& names, const std::string& name) {
  if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

RailChoice every_rail(std::span<const std::string> rail_nics, std::string why) {
  RailChoice c;
  for (std::uint32_t r = 0; r < rail_nics.size(); ++r) {
    c.rails.push_back(r);
    add_unique(c.nics, rail_nics[r]);
  }
  c.all = true;
  c.why = "all " + std::to_string(rail_nics.size()) + " rails: " + std::move(why);
  return c;
}

}  // namespace

RailChoice choose_rails(std::span<const std::string> rail_nics, const Result<NicChoice>& ranked,
                        RailPolicy policy) {
  const bool any_nic =
      std::any_of(rail_nics.begin(), rail_nics.end(), [](const std::string& n) { return !n.empty(); });
  if (!any_nic) {
    RailChoice c = every_rail(rail_nics, "they share one interface, there is no NIC to choose");
    c.nics.clear();
    return c;
  }
  if (policy == RailPolicy::All) return every_rail(rail_nics, "striping over every rail was asked for");
  if (!ranked) return every_rail(rail_nics, "NIC distance unknown (" + ranked.error().message + ")");

  // The nearest class among the rails' own NICs: a node whose nearest NIC carries no rail still prefers
  // the next-nearest rails to far ones.
  auto distance_of = [&](const std::string& nic) -> std::optional<PcieDistance> {
    for (std::size_t i = 0; i < ranked->nics.size() && i < ranked->distances.size(); ++i) {
      if (ranked->nics[i] == nic) return ranked->distances[i];
    }
    return std::nullopt;
  };
  std::optional<PcieDistance> best;
  for (const auto& nic : rail_nics) {
    const auto d = distance_of(nic);
    if (d && (!best || *d < *best)) best = d;
  }
  if (!best) {
    std::vector<std::string> names;
    for (const auto& nic : rail_nics) add_unique(names, nic);
    return every_rail(rail_nics, "the topology knows none of their NICs (" + join(names, ", ") + ")");
  }
  RailChoice c;
  for (std::uint32_t r = 0; r < rail_nics.size(); ++r) {
    const auto d = distance_of(rail_nics[r]);
    if (d && *d == *best) {
      c.rails.push_back(r);
      add_unique(c.nics, rail_nics[r]);
    }
  }
  c.all = c.rails.size() == rail_nics.size();
  c.why = std::to_string(c.rails.size()) + " of " + std::to_string(rail_nics.size()) + " rails, on " +
          join(c.nics, ", ") + " (" + std::string(to_string(*best)) + "): the nearest of the rails' NICs";
  return c;
}

}  // namespace conduit
