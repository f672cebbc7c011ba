// The transports this agent opened (one per provider asked for), looked up by provider name.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/transport.h"

namespace conduit::agent {

class Fabric {
 public:
  // Opens each provider; "auto" opens the best present. An empty result is an error naming every failure.
  static Result<Fabric> open(const std::vector<std::string>& providers, int rails,
                             const std::string& bind_address, std::chrono::milliseconds stall_timeout);

  Transport* find(std::string_view provider) const;  // by canonical name ("tcp;ofi_rxm") or alias ("tcp")
  Transport* primary() const { return transports_.empty() ? nullptr : transports_.front().get(); }
  const std::vector<std::unique_ptr<Transport>>& transports() const { return transports_; }
  // [{provider, name, rails, address (hex), mrMode, orderedRaw, deviceMemory}]
  nlohmann::json to_json() const;

 private:
  std::vector<std::unique_ptr<Transport>> transports_;
};

}  // namespace conduit::agent
