// What the controller last learnt about each node's agent: the facts its FabricNode publishes (Reachable,
// RDMAReady, the transports it serves), kept in memory so the check before every attempt costs no request.
// Discovery writes them at each round; the reconciler writes what it learns when it asks a node itself.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "clock.h"
#include "conduit/common/result.h"

namespace conduit::controller {

struct NodeFacts {
  bool reachable = false;
  std::string unreachable_why;  // the error of the last GET /v1/node that failed
  // It failed in TLS (a certificate not trusted): something listens there, and waiting will not fix that.
  bool tls_failed = false;
  std::optional<bool> rdma_ready;  // the agent's rdma check; nullopt: unknown (never answered)
  std::string rdma_why;
  std::vector<std::string> transports;  // short names (transport_name): efa, verbs, tcp, shm
  // The node's link rate as its agent reports it (linkBytesPerSecond; FabricNode status too): what a Reshard
  // plan's lower bound divides by. nullopt: not reported, the bound is left unknown.
  std::optional<double> link_bytes_per_second;
  TimePoint observed;

  // From an agent's GET /v1/node answer.
  static NodeFacts answered(const nlohmann::json& info, TimePoint when);
  // An agent that did not answer keeps what it last reported; only reachability changes.
  NodeFacts unanswered(const Error& error, TimePoint when) const;
};

// The agent's readiness check `name` ("rdma", "gpu") in a GET /v1/node answer as {ok, message}; absent: not
// ok, "not reported".
std::pair<bool, std::string> agent_check(const nlohmann::json& info, const std::string& name);

// node -> facts, shared by discovery (one thread) and the reconciler's workers.
class FabricFacts {
 public:
  void set(const std::string& node, NodeFacts facts);
  std::optional<NodeFacts> get(const std::string& node) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, NodeFacts> facts_;
};

}  // namespace conduit::controller
