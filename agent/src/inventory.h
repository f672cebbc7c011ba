// GET /v1/node: what this node has and why RDMA or GPU may be unavailable here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "config.h"
#include "regions.h"
#include "transport_set.h"

namespace conduit::agent {

inline constexpr const char* kAgentVersion = "0.1.0";

// {node, version, fabric: TransportSet::to_json, topology: Topology::to_json, memory: {cap, used},
//  checks: [{name: "rdma"|"gpu"|"memlock"|"ipcLock"|"ibverbs", ok, message}]}
nlohmann::json node_inventory(const AgentConfig& config, const TransportSet& transports,
                              const RegionStore& regions, const std::string& sysfs_root = "/sys");

}  // namespace conduit::agent
