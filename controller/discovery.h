// FabricNodes from the agents the controller knows: one per node, with whether its agent answered
// GET /v1/node and what it reported, in the shape the FabricNode CRD validates. Shared by local mode and
// Kubernetes mode.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reconcile/agent_api.h"
#include "reconcile/node_facts.h"
#include "store/object_store.h"

namespace conduit::controller {

// The agents an agent Service's EndpointSlices list: node -> "http://ADDRESS:PORT" for every ready endpoint,
// the node being the endpoint's nodeName, else its targetRef.name, else its hostname; the port is the one
// named "http", else the slice's first. Endpoints without a usable node name or address are left out.
std::map<std::string, std::string> agents_from_endpoint_slices(const std::vector<nlohmann::json>& slices);

// How often discovery runs, in both modes. With the agent client's 2 s connect timeout, a dead agent shows
// Reachable=False within ~7 s; a job's pre-flight asks a node whose facts say so again itself, so one that
// comes back runs its jobs within a second, not a period.
inline constexpr std::chrono::seconds kDiscoveryPeriod{5};

class NodeDiscovery {
 public:
  // `facts` (optional, outliving this) gets what each FabricNode says, for the reconciler's pre-flight.
  explicit NodeDiscovery(FabricFacts* facts = nullptr) : facts_(facts) {}

  // Asks every agent in `directory` for /v1/node and upserts its FabricNode: conditions Reachable,
  // RDMAReady and GPUReady, the agent's NICs, GPUs, transports and memory. An agent that does not answer
  // turns Reachable=False and keeps what it last reported; so does one that left the directory (its pod is
  // no longer a ready endpoint of the agent Service).
  void run(AgentApi& agents, const AgentDirectory& directory, ObjectStore& store);
  // Nodes whose last written status says Reachable=True, and the others.
  std::pair<int, int> reachable_counts() const;

 private:
  // The status last written per node: the store replaces a status wholesale, and a condition's
  // lastTransitionTime must survive writes that do not change its status.
  std::map<std::string, nlohmann::json> last_;
  std::map<std::string, std::string> endpoints_;  // the agent URL last written per node
  FabricFacts* facts_;
};

}  // namespace conduit::controller
