// FabricNodes from the agents the controller knows: one per node, with whether its agent answered
// GET /v1/node and what it reported, in the shape the FabricNode CRD validates. Shared by local mode and
// Kubernetes mode.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reconcile/agent_api.h"
#include "store/object_store.h"

namespace conduit::controller {

// The agents an agent Service's EndpointSlices list: node -> "http://ADDRESS:PORT" for every ready endpoint,
// the node being the endpoint's nodeName, else its targetRef.name, else its hostname; the port is the one
// named "http", else the slice's first. Endpoints without a usable node name or address are left out.
std::map<std::string, std::string> agents_from_endpoint_slices(const std::vector<nlohmann::json>& slices);

class NodeDiscovery {
 public:
  // Asks every agent in `directory` for /v1/node and upserts its FabricNode: conditions Reachable,
  // RDMAReady and GPUReady, the agent's NICs, GPUs, transports and memory. An agent that does not answer
  // turns Reachable=False and keeps what it last reported.
  void run(AgentApi& agents, const AgentDirectory& directory, ObjectStore& store);
  // Nodes whose last written status says Reachable=True, and the others.
  std::pair<int, int> reachable_counts() const;

 private:
  // The status last written per node: the store replaces a status wholesale, and a condition's
  // lastTransitionTime must survive writes that do not change its status.
  std::map<std::string, nlohmann::json> last_;
};

}  // namespace conduit::controller
