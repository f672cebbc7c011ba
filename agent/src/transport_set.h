// The set of transports this agent opened (one per provider asked for), looked up by provider name, and
// how a region picks its rails on each.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/memory_region.h"
#include "conduit/rail_choice.h"
#include "conduit/topology.h"
#include "conduit/transport.h"

namespace conduit::agent {

class TransportSet {
 public:
  // Opens each provider with `each` but for its provider ("auto" opens the best present). An empty result is
  // an error naming every failure.
  static Result<TransportSet> open(const std::vector<std::string>& providers, const TransportConfig& each);
  // The same with the data plane's defaults (tests: rails, address and stall timeout are all they vary).
  static Result<TransportSet> open(const std::vector<std::string>& providers, int rails,
                                   const std::string& bind_address, std::chrono::milliseconds stall_timeout) {
    return open(providers, TransportConfig{
                               .rails = rails, .bind_address = bind_address, .stall_timeout = stall_timeout});
  }

  Transport* find(std::string_view provider) const;  // by canonical name ("tcp;ofi_rxm") or alias ("tcp")
  Transport* primary() const { return transports_.empty() ? nullptr : transports_.front().get(); }
  const std::vector<std::unique_ptr<Transport>>& transports() const { return transports_; }
  // [{provider, name, rails, railNics, address (hex), mrMode, orderedRaw, deviceMemory}]
  nlohmann::json to_json() const;

  // How regions pick their rails: the node's topology (nullopt when sysfs could not be read: every region
  // then uses every rail) and whether to stripe over every rail regardless (--stripe-all-rails).
  void set_rail_policy(std::optional<Topology> topology, RailPolicy policy);
  // The rails of `transport` that `memory` is registered on: those whose NIC is nearest it. What grants
  // and transfer sources pass to register_memory.
  RailChoice rails_for(const Transport& transport, const MemoryRegion& memory) const;
  // [{provider, rails, nics, why}] for every transport: what GET /v1/regions shows per region.
  nlohmann::json rails_json(const MemoryRegion& memory) const;

 private:
  std::vector<std::unique_ptr<Transport>> transports_;
  std::optional<Topology> topology_;
  RailPolicy policy_ = RailPolicy::Nearest;
};

// Where a region's memory lives: its GPU's PCI address for CUDA memory, otherwise the NUMA node of its
// first page (-1 when the kernel does not say, e.g. a page never touched).
MemoryPlace place_of(const MemoryRegion& memory);

}  // namespace conduit::agent
