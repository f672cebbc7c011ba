#include "conduit/nic_choice.h"

#include <algorithm>

namespace conduit {

namespace {

// Host memory has no PCIe position: a NIC on its NUMA node is as near as it gets, any other crosses the
// socket interconnect. Unknown NUMA nodes compare as near, since nothing better is known.
PcieDistance host_distance(int numa_node, const Nic& nic) {
  if (numa_node < 0 || nic.numa_node < 0 || numa_node == nic.numa_node) return PcieDistance::SameNumaNode;
  return PcieDistance::CrossSocket;
}

}  // namespace

Result<NicChoice> choose_nics(const Topology& topology, const MemoryPlace& place,
                              const NicChoiceOptions& options) {
  const Gpu* gpu = nullptr;
  if (!place.gpu_pci.empty()) {
    for (const auto& g : topology.gpus) {
      if (g.pci_address == place.gpu_pci) gpu = &g;
    }
    if (gpu == nullptr) return make_error(ErrorCode::NotFound, "no GPU at PCI address " + place.gpu_pci);
  }
  std::vector<std::pair<PcieDistance, const Nic*>> ranked;
  for (const auto& nic : topology.nics) {
    if (nic.kind != options.kind) continue;
    ranked.emplace_back(gpu != nullptr ? Topology::distance(*gpu, nic) : host_distance(place.numa_node, nic),
                        &nic);
  }
  if (ranked.empty()) return make_error(ErrorCode::NotFound, "no " + options.kind + " NIC on this node");
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  NicChoice choice;
  const PcieDistance best = ranked.front().first;
  for (const auto& [distance, nic] : ranked) {
    if (options.best_class_only && distance != best) break;
    choice.nics.push_back(nic->name);
    choice.distances.push_back(distance);
    choice.distance = distance;
  }
  const std::string memory = gpu != nullptr ? "GPU " + gpu->pci_address
                                            : "host memory on NUMA node " + std::to_string(place.numa_node);
  choice.why = std::to_string(choice.nics.size()) + " of " + std::to_string(ranked.size()) + " " +
               options.kind + " NICs for " + memory + ": " +
               (options.best_class_only ? "the nearest class, " + std::string(to_string(best))
                                        : "all, nearest (" + std::string(to_string(best)) + ") first");
  return choice;
}

}  // namespace conduit
