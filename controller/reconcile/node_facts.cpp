#include "node_facts.h"

#include "agent_api.h"

namespace conduit::controller {

using json = nlohmann::json;

std::pair<bool, std::string> agent_check(const json& info, const std::string& name) {
  for (const auto& c : info.value("checks", json::array())) {
    if (c.is_object() && c.value("name", "") == name) return {c.value("ok", false), c.value("message", "")};
  }
  return {false, "the agent reported no " + name + " check"};
}

NodeFacts NodeFacts::answered(const json& info, TimePoint when) {
  NodeFacts f;
  f.reachable = true;
  f.observed = when;
  if (!info.is_object()) return f;
  auto [ok, why] = agent_check(info, "rdma");
  f.rdma_ready = ok;
  f.rdma_why = std::move(why);
  for (const auto& t : info.value("fabric", json::array())) {
    if (t.is_object()) f.transports.push_back(transport_name(t.value("provider", "")));
  }
  if (const json rate = info.value("linkBytesPerSecond", json()); rate.is_number() && rate.get<double>() > 0)
    f.link_bytes_per_second = rate.get<double>();
  return f;
}

NodeFacts NodeFacts::unanswered(const Error& error, TimePoint when) const {
  NodeFacts f = *this;
  f.reachable = false;
  // The agent client says Forbidden for a TLS failure (a certificate not trusted either way).
  f.tls_failed = error.code == ErrorCode::Forbidden;
  f.unreachable_why = error.message;
  f.observed = when;
  return f;
}

void FabricFacts::set(const std::string& node, NodeFacts facts) {
  std::lock_guard lock(mu_);
  facts_[node] = std::move(facts);
}

std::optional<NodeFacts> FabricFacts::get(const std::string& node) const {
  std::lock_guard lock(mu_);
  const auto it = facts_.find(node);
  if (it == facts_.end()) return std::nullopt;
  return it->second;
}

}  // namespace conduit::controller
