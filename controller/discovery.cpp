#include "discovery.h"

#include "conduit/common/condition.h"
#include "conduit/common/log.h"
#include "reconcile/job_status.h"
#include "reconcile/transfer_job.h"

namespace conduit::controller {

using json = nlohmann::json;

std::map<std::string, std::string> agents_from_endpoint_slices(const std::vector<json>& slices) {
  std::map<std::string, std::string> found;
  for (const auto& slice : slices) {
    // The agents' port: one named "https" (they serve TLS) or "http", else the first.
    int port = 0;
    std::string scheme = "http";
    for (const auto& p : slice.value("ports", json::array())) {
      const std::string name = p.value("name", "");
      if (port == 0 || name == "http" || name == "https") {
        port = p.value("port", 0);
        scheme = name == "https" ? "https" : "http";
      }
    }
    if (port <= 0) continue;
    for (const auto& e : slice.value("endpoints", json::array())) {
      // Absent means ready, as the EndpointSlice API says.
      if (!e.value("conditions", json::object()).value("ready", true)) continue;
      const auto addresses = e.value("addresses", json::array());
      if (!addresses.is_array() || addresses.empty() || !addresses[0].is_string()) continue;
      std::string node = e.value("nodeName", "");
      if (node.empty()) node = e.value("targetRef", json::object()).value("name", "");
      if (node.empty()) node = e.value("hostname", "");
      if (!is_dns1123_subdomain(node)) continue;
      const std::string address = addresses[0].get<std::string>();
      const std::string host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
      found[node] = scheme + "://" + host + ":" + std::to_string(port);
    }
  }
  return found;
}

std::pair<int, int> NodeDiscovery::reachable_counts() const {
  std::pair<int, int> counts{0, 0};
  for (const auto& [node, status] : last_) {
    bool reachable = false;
    for (const auto& c : status.value("conditions", json::array())) {
      if (c.value("type", "") == "Reachable") reachable = c.value("status", "") == "True";
    }
    ++(reachable ? counts.first : counts.second);
  }
  return counts;
}

void NodeDiscovery::run(AgentApi& agents, const AgentDirectory& directory, ObjectStore& store) {
  const auto now_time = std::chrono::system_clock::now();
  const std::string now = format_rfc3339(now_time);
  // The directory's nodes, then those that left it since they were written.
  std::vector<std::string> nodes = directory.nodes();
  for (const auto& [node, status] : last_) {
    if (!directory.url(node)) nodes.push_back(node);
  }
  for (const auto& node : nodes) {
    const auto url = directory.url(node);
    if (url) endpoints_[node] = *url;
    const json spec{{"nodeName", node}, {"agentEndpoint", endpoints_[node]}};
    json status = last_.count(node) > 0 ? last_[node] : json::object();
    auto info = url ? agents.node_info(node)
                    : Result<json>(make_error(ErrorCode::PeerUnreachable,
                                              "the agent is not among the agent Service's ready endpoints"));
    // Conditions are set in place on the last status: lastTransitionTime moves only when one changes.
    const auto set = [&](const char* type, const char* value, const char* reason,
                         const std::string& message) {
      conduit::set_condition(status, {type, value, reason, message}, now_time);
    };
    if (info) {
      set("Reachable", "True", "AgentAnswered", "GET /v1/node answered");
      const auto [rdma_ok, rdma_message] = agent_check(*info, "rdma");
      set("RDMAReady", rdma_ok ? "True" : "False", rdma_ok ? "RDMAUsable" : "NoRDMA", rdma_message);
      const auto [gpu_ok, gpu_message] = agent_check(*info, "gpu");
      set("GPUReady", gpu_ok ? "True" : "False", gpu_ok ? "GPUsUsable" : "NoGPU", gpu_message);
      status["agentVersion"] = info->value("version", "");
      std::string summary;
      json transports = json::array();
      for (const auto& f : info->value("fabric", json::array())) {
        // The short name a TransferJob's spec.transport.type uses, whatever the agent calls it.
        json t = f;
        t["name"] = transport_name(f.value("provider", ""));
        summary += (summary.empty() ? "" : ",") + t["name"].get<std::string>();
        transports.push_back(std::move(t));
      }
      status["transports"] = transports;
      status["transportSummary"] = summary;
      const json topology = info->value("topology", json());
      const json nics = topology.is_object() ? topology.value("nics", json::array()) : json::array();
      json gpus = topology.is_object() ? topology.value("gpus", json::array()) : json::array();
      // The agent's choice of NICs per GPU (its /v1/node topology.nicChoice), next to each GPU.
      const json choice = topology.is_object() ? topology.value("nicChoice", json::object()) : json::object();
      for (auto& gpu : gpus) {
        if (!choice.is_object() || !choice.contains("gpus") || !choice["gpus"].is_array()) break;
        for (const auto& c : choice["gpus"]) {
          if (!c.is_object() || c.value("gpu", "") != gpu.value("pciAddress", "")) continue;
          gpu["nearestNics"] = c.value("nics", json::array());
          if (c.contains("distance")) gpu["nicDistance"] = c["distance"];
        }
      }
      status["nics"] = nics;
      status["gpus"] = gpus;
      status["nicCount"] = nics.size();
      status["gpuCount"] = gpus.size();
      if (topology.is_object()) status["topology"] = topology;
      const json memory = info->value("memory", json::object());
      status["memory"] = {{"capBytes", memory.value("cap", std::uint64_t{0})},
                          {"usedBytes", memory.value("used", std::uint64_t{0})}};
      // What a Reshard plan's lower bound divides by (reshard.cpp), where the agent reports it.
      if (const json rate = info->value("linkBytesPerSecond", json());
          rate.is_number() && rate.get<double>() > 0)
        status["linkBytesPerSecond"] = rate;
      // The agent's proof-of-path totals (docs/path.md): transfers by verdict, bytes per NIC.
      if (json paths = info->value("paths", json()); paths.is_object()) {
        // The CRD holds 64 NICs; a node with more keeps the first 64 (the agent lists them by name).
        if (paths.contains("nics") && paths["nics"].is_array() && paths["nics"].size() > 64)
          paths["nics"].erase(paths["nics"].begin() + 64, paths["nics"].end());
        status["pathTotals"] = std::move(paths);
      }
      status["lastSeen"] = now;
    } else {
      // What the node last reported stays; only reachability changes, and readiness becomes unknown.
      set("Reachable", "False", "AgentUnreachable", info.error().message);
      for (const char* type : {"RDMAReady", "GPUReady"}) {
        set(type, "Unknown", "AgentUnreachable", "the agent does not answer");
      }
    }
    if (facts_ != nullptr) {
      const auto known = facts_->get(node);
      facts_->set(node, info ? NodeFacts::answered(*info, now_time)
                             : known.value_or(NodeFacts{}).unanswered(info.error(), now_time));
    }
    if (auto s = store.upsert_node(node, spec, status); !s) {
      log::warn("writing the FabricNode failed", {{"node", node}, {"error", s.error().message}});
      continue;
    }
    last_[node] = std::move(status);
  }
}

}  // namespace conduit::controller
