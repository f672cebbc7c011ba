// GET /v1/node: what this node has and why RDMA or GPU may be unavailable here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "config.h"
#include "regions.h"
#include "transport_set.h"

namespace conduit::agent {

inline constexpr const char* kAgentVersion = "0.1.0";

// 16 random hex digits drawn once per agent process: GET /v1/node and the import socket both say it, so a
// client can tell that the two are the same agent (a node name alone does not: two agents may share one).
const std::string& instance_id();

// {node, instance, version, fabric: TransportSet::to_json, topology: Topology::to_json, memory: {cap, used},
//  checks: [{name: "rdma"|"gpu"|"memlock"|"ipcLock"|"ibverbs", ok, message}]}
nlohmann::json node_inventory(const AgentConfig& config, const TransportSet& transports,
                              const RegionStore& regions, const std::string& sysfs_root = "/sys");

}  // namespace conduit::agent
