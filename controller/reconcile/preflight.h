// The check before an attempt starts: from what the FabricNodes of the nodes the attempt touches say, may it
// start now, must it wait for a node whose agent does not answer, or can it never run as the spec asks (a
// transport a node cannot serve)? Pure; the reconciler supplies the facts (hold.cpp) and carries it out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "node_facts.h"
#include "transfer_job.h"

namespace conduit::controller {

struct PreflightNode {
  std::string name;
  bool has_agent = false;          // the agent directory holds an address for it
  std::optional<NodeFacts> facts;  // nullopt: discovery has not seen it (yet)
};

struct Preflight {
  enum class Verdict : std::uint8_t { Go, Wait, Fail };
  Verdict verdict = Verdict::Go;
  std::string reason;  // Wait: PeerUnreachable; Fail: NodeNotFound or TransportUnavailable
  std::string message;
  std::vector<std::string> waiting_for;  // Wait: the nodes that do not answer
  std::string transport;                 // Go: what to ask the agents for; "": each agent's own choice
  std::string fallback;  // Go: why that is not what the spec asked for (allowFallback); "" when it is
};

// `nodes`: the source's, then the targets', each once. A node nothing is known about
// is not held against the job: its agent has the last word when the attempt asks it.
Preflight preflight(const TransferJobSpec& spec, const std::vector<PreflightNode>& nodes);

}  // namespace conduit::controller
