#include "preflight.h"

#include <algorithm>

#include "step.h"

namespace conduit::controller {

namespace {

std::string quoted(const std::string& node) { return "\"" + node + "\""; }

bool serves(const NodeFacts& f, const std::string& transport) {
  return std::find(f.transports.begin(), f.transports.end(), transport) != f.transports.end();
}

// Why a node that answers cannot serve `transport`, in the words of its FabricNode.
std::string why_not(const NodeFacts& f, const std::string& transport) {
  std::string why;
  if ((transport == "efa" || transport == "verbs") && f.rdma_ready && !*f.rdma_ready) {
    why = "RDMAReady is False (" + f.rdma_why + "); ";
  }
  std::string offers;
  for (const auto& t : f.transports) offers += (offers.empty() ? "" : ", ") + t;
  return why + "its agent offers " + (offers.empty() ? "no transport" : offers);
}

}  // namespace

Preflight preflight(const TransferJobSpec& spec, const std::vector<PreflightNode>& nodes) {
  Preflight out;
  // A node no agent was ever seen on is a typo, not an outage: waiting would never end.
  for (const auto& n : nodes) {
    if (n.has_agent || n.facts) continue;
    out.verdict = Preflight::Verdict::Fail;
    out.reason = reason::kNodeNotFound;
    out.message = "no conduit-agent is known on node " + quoted(n.name) +
                  "; check the node name (FabricNodes list the known ones)";
    return out;
  }

  // The transport, judged on the nodes that answer (what one that does not last said may be stale).
  const std::string wanted =
      spec.transport == TransportType::Auto ? "" : std::string(to_string(spec.transport));
  out.transport = wanted;
  std::string cannot;
  std::vector<const NodeFacts*> answering;
  for (const auto& n : nodes) {
    if (!n.has_agent || !n.facts || !n.facts->reachable) continue;
    answering.push_back(&*n.facts);
    if (wanted.empty() || serves(*n.facts, wanted)) continue;
    cannot += (cannot.empty() ? "" : "; ") + std::string("node ") + quoted(n.name) +
              " cannot serve transport " + wanted + ": " + why_not(*n.facts, wanted);
  }
  if (!cannot.empty() && !spec.allow_fallback) {
    out.verdict = Preflight::Verdict::Fail;
    out.reason = reason::kTransportUnavailable;
    out.message = cannot + "; set transport.allowFallback: true to fall back";
    return out;
  }
  if (!cannot.empty()) {
    // The best every answering node serves; none in common: each agent's own choice.
    out.transport.clear();
    for (const char* t : {"efa", "verbs", "tcp"}) {
      if (t == wanted) continue;
      if (std::all_of(answering.begin(), answering.end(),
                      [&](const NodeFacts* f) { return serves(*f, t); })) {
        out.transport = t;
        break;
      }
    }
    out.fallback = "transport " +
                   (out.transport.empty() ? std::string("of each agent's choice") : out.transport) +
                   " instead of " + wanted + " (allowFallback): " + cannot;
  }

  // Nodes whose agent does not answer: wait for them, without spending an attempt.
  std::string waiting;
  // One whose TLS failed is left to the attempt, which fails with that reason.
  for (const auto& n : nodes) {
    if (n.has_agent && (!n.facts || n.facts->reachable || n.facts->tls_failed)) continue;
    std::string why = !n.has_agent ? "no address for its agent: not among the agent Service's ready endpoints"
                                   : n.facts->unreachable_why;
    if (why.empty()) why = "GET /v1/node did not answer";
    waiting += (waiting.empty() ? "" : ", ") + quoted(n.name) + " (" + why + ")";
    out.waiting_for.push_back(n.name);
  }
  if (!out.waiting_for.empty()) {
    const bool one = out.waiting_for.size() == 1;
    out.verdict = Preflight::Verdict::Wait;
    out.reason = reason::kPeerUnreachable;
    out.message = std::string("waiting for node") + (one ? " " : "s ") + waiting + ", whose agent" +
                  (one ? " does" : "s do") + " not answer";
  }
  return out;
}

}  // namespace conduit::controller
