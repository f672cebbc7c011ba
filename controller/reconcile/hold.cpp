// The pre-flight as the reconciler carries it out: the pods a podSelector job runs over (pods.h), the facts
// of the nodes an attempt touches (discovery's, asked again where they say a node does not answer), the
// verdict (preflight.h), and a job held Pending while a node does not answer or no pod is Ready, which spends
// no attempt of its backoffLimit.
#include <algorithm>

#include "conduit/common/log.h"
#include "in_parallel.h"
#include "job_status.h"
#include "pass.h"
#include "pods.h"

namespace conduit::controller {

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// A held job looks again this often; a node that came back is asked at most this long after it did.
constexpr std::chrono::milliseconds kHoldRecheck{1000};
// Facts saying a node does not answer are asked again when older than this (so held jobs share the asking).
constexpr std::chrono::milliseconds kAskAgainAfter{500};

}  // namespace

std::optional<NodeFacts> Reconciler::facts_for(const Pass& p, const std::string& node, bool ask) {
  std::optional<NodeFacts> known = options_.facts != nullptr ? options_.facts->get(node) : std::nullopt;
  const bool stale_down = known && !known->reachable && p.now - known->observed >= kAskAgainAfter;
  if (!(ask || stale_down) || !agents_.url(node)) return known;
  auto info = agents_.node_info(node);
  NodeFacts fresh =
      info ? NodeFacts::answered(*info, p.now) : known.value_or(NodeFacts{}).unanswered(info.error(), p.now);
  if (options_.facts != nullptr) options_.facts->set(node, fresh);
  return fresh;
}

std::optional<bool> Reconciler::pick_pods(Pass& p) {
  auto list = [&](const std::string& selector) { return options_.pods->list_pods(p.key.ns, selector); };
  PodResolution picked = resolve_pods(p.spec(), p.key.ns, list);
  if (picked.verdict == PodResolution::Verdict::Wait) {
    hold(p, {picked.reason, picked.message});
    return false;
  }
  if (picked.verdict == PodResolution::Verdict::Fail) {
    fail(p, picked.reason, picked.message);
    return true;
  }
  p.view.spec = std::move(picked.spec);
  p.run.pods = std::move(picked.pods);
  p.status["pods"] = pods_status(p.run.pods);
  std::string chosen;
  std::size_t left_out = 0;
  for (const auto& pod : p.run.pods) {
    if (pod.selected) {
      chosen += (chosen.empty() ? "" : ", ") + pod.name + " (" + pod.node + ")";
    } else {
      ++left_out;
    }
  }
  const std::string message =
      "runs over pods " + chosen +
      (left_out > 0 ? "; " + std::to_string(left_out) + " left out (status.pods)" : "");
  store_.record_event(p.key, "Normal", "PodsPicked", message);
  log::info("podSelector resolved", {{"job", p.job_name()}, {"message", message}});
  // Before anything is asked of an agent: a restart must run over these pods, not pick again.
  if (!save_run(p)) return false;
  return std::nullopt;
}

Preflight Reconciler::check_nodes(Pass& p, bool ask_all) {
  const auto& spec = p.spec();
  // The source and every target: one that landed earlier is asked too, whether its region still holds the
  // bytes (prepare_targets), before the job may say it does.
  std::vector<std::string> names{spec.source.node};
  for (const auto& s : spec.sources) {  // Reshard: every source pod's node
    if (std::find(names.begin(), names.end(), s.node) == names.end()) names.push_back(s.node);
  }
  for (const auto& t : spec.targets) {
    if (std::find(names.begin(), names.end(), t.node) == names.end()) names.push_back(t.node);
  }
  const auto nodes = in_parallel<PreflightNode>(names.size(), [&](std::size_t i) {
    return PreflightNode{names[i], agents_.url(names[i]).has_value(), facts_for(p, names[i], ask_all)};
  });
  return preflight(spec, nodes);
}

void Reconciler::hold(Pass& p, const Waiting& why) {
  const auto before = waiting_of(p.stored_status);
  const bool held_before = before && before->reason == why.reason;
  // As batch/v1 Job: activeDeadlineSeconds counts from when the controller took the job up, waiting included.
  if (!p.status.contains("startTime")) p.status["startTime"] = format_rfc3339(p.now, TimePrecision::Millis);
  p.status["phase"] = phase::kPending;
  p.status["throughputBytesPerSecond"] = 0;
  p.status["throughput"] = "";
  set_condition(p.status, "Running", false, why.reason, why.message, p.now, p.generation);
  if (p.status.contains("targets") && p.status["targets"].is_array()) {
    for (std::size_t i = 0; i < p.status["targets"].size(); ++i) {
      if (!p.run.target_landed(i)) p.status["targets"][i]["state"] = "Pending";
    }
  }
  if (!held_before) {
    store_.record_event(p.key, "Warning", why.reason, why.message);
    log::warn("job held Pending", {{"job", p.job_name()}, {"reason", why.reason}, {"message", why.message}});
  }
  p.wait = kHoldRecheck;
  const auto started = parse_rfc3339(p.status.value("startTime", ""));
  if (started && p.spec().active_deadline_seconds) {
    const auto left = *started + std::chrono::seconds(*p.spec().active_deadline_seconds) - p.now;
    p.wait = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(left), 0ms, kHoldRecheck);
  }
}

}  // namespace conduit::controller
