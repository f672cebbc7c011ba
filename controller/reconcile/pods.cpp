#include "pods.h"

#include <algorithm>
#include <map>

#include "step.h"

namespace conduit::controller {

using json = nlohmann::json;

namespace {

std::string str(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_string()) return "";
  return object[key].get<std::string>();
}

const json& sub(const json& object, const char* key) {
  static const json kNone = json::object();
  return object.is_object() && object.contains(key) && object[key].is_object() ? object[key] : kNone;
}

std::string selector_text(const LabelSelector& s, const std::string& ns) {
  return "podSelector \"" + s.to_query() + "\" in namespace " + ns;
}

std::string names(const std::vector<PodPick>& pods) {
  std::string out;
  for (const auto& p : pods) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

// What one selector matched, in pod-name order: every pod, each selected or left out with why.
std::vector<PodPick> pick(const std::vector<json>& listed, bool source, std::uint32_t entry,
                          const std::string& container) {
  std::vector<PodPick> out;
  for (const auto& pod : listed) {
    const json& meta = sub(pod, "metadata");
    PodPick p;
    p.name = str(meta, "name");
    p.uid = str(meta, "uid");
    p.node = str(sub(pod, "spec"), "nodeName");
    p.source = source;
    p.entry = entry;
    p.why = why_left_out(pod, container);
    p.selected = p.why.empty();
    if (!container.empty()) p.container_id = container_id(pod, container);
    if (!p.name.empty()) out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const PodPick& a, const PodPick& b) { return a.name < b.name; });
  return out;
}

}  // namespace

json PodPick::to_json(bool with_entry) const {
  json j{{"name", name},
         {"uid", uid},
         {"node", node},
         {"role", source ? "source" : "target"},
         {"state", selected ? "Selected" : "LeftOut"}};
  if (!why.empty()) j["message"] = why;
  if (!container_id.empty()) j["containerID"] = container_id;
  if (with_entry && !source) j["entry"] = entry;
  return j;
}

std::optional<PodPick> PodPick::from_json(const json& j) {
  if (!j.is_object() || str(j, "name").empty()) return std::nullopt;
  PodPick p;
  p.name = str(j, "name");
  p.uid = str(j, "uid");
  p.node = str(j, "node");
  p.source = str(j, "role") == "source";
  p.entry = j.contains("entry") && j["entry"].is_number_unsigned() ? j["entry"].get<std::uint32_t>() : 0;
  p.selected = str(j, "state") == "Selected";
  p.container_id = str(j, "containerID");
  p.why = str(j, "message");
  return p;
}

std::string container_id(const json& pod, const std::string& container) {
  const json& status = sub(pod, "status");
  if (!status.contains("containerStatuses") || !status["containerStatuses"].is_array()) return "";
  for (const auto& c : status["containerStatuses"]) {
    if (str(c, "name") != container) continue;
    const std::string id = str(c, "containerID");
    const auto scheme = id.find("://");
    return scheme == std::string::npos ? id : id.substr(scheme + 3);
  }
  return "";
}

std::string why_left_out(const json& pod, const std::string& container) {
  const json& meta = sub(pod, "metadata");
  if (meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null())
    return "the pod is terminating";
  if (str(sub(pod, "spec"), "nodeName").empty()) return "the pod is not scheduled to a node yet";
  const json& status = sub(pod, "status");
  const std::string phase = str(status, "phase");
  if (phase == "Succeeded" || phase == "Failed") return "the pod has ended (phase " + phase + ")";
  if (status.contains("conditions") && status["conditions"].is_array()) {
    for (const auto& c : status["conditions"]) {
      if (str(c, "type") != "Ready") continue;
      if (str(c, "status") == "True") {
        if (container.empty() || !container_id(pod, container).empty()) return "";
        return "the pod has no started container \"" + container + "\"";
      }
      std::string why = "the pod is not Ready";
      if (!str(c, "reason").empty()) why += " (" + str(c, "reason") + ")";
      return why;
    }
  }
  return "the pod is not Ready (no Ready condition yet)";
}

PodResolution resolve_pods(const TransferJobSpec& spec, const std::string& ns, const ListPods& list) {
  PodResolution r;
  auto matched = [&](const LabelSelector& s, const std::string& container, bool source,
                     std::uint32_t entry) -> std::optional<PodResolution> {
    auto listed = list(s.to_query());
    if (!listed) {
      const bool forbidden = listed.error().code == ErrorCode::RemoteAccess;  // 401, 403
      // Not allowed to list pods will not change by waiting; an API server that does not answer may.
      return PodResolution{
          forbidden ? PodResolution::Verdict::Fail : PodResolution::Verdict::Wait,
          reason::kPodsUnknown,
          "listing the pods of " + selector_text(s, ns) + " failed: " + listed.error().message,
          {}};
    }
    auto pods = pick(*listed, source, entry, container);
    std::vector<PodPick> ready;
    std::copy_if(pods.begin(), pods.end(), std::back_inserter(ready),
                 [](const PodPick& p) { return p.selected; });
    const std::string what = source ? "source." : "targets[" + std::to_string(entry) + "].";
    if (ready.empty()) {
      std::string message = "waiting for a Ready pod: " + what + selector_text(s, ns) + " matches ";
      if (pods.empty()) {
        message += "no pod";
      } else {
        message += std::to_string(pods.size()) + " pod(s), none Ready:";
        for (const auto& p : pods) message += " " + p.name + ": " + p.why + ";";
        message.pop_back();
      }
      return PodResolution{PodResolution::Verdict::Wait, reason::kNoReadyPods, message, {}};
    }
    // Reshard's source is every trainer pod: each holds a shard.
    if (source && ready.size() > 1 && spec.strategy != Strategy::Reshard) {
      return PodResolution{PodResolution::Verdict::Fail,
                           reason::kAmbiguousPodSelector,
                           "source." + selector_text(s, ns) + " matches " + std::to_string(ready.size()) +
                               " Ready pods (" + names(ready) +
                               "); a source is one pod's region: narrow the selector",
                           {}};
    }
    r.pods.insert(r.pods.end(), pods.begin(), pods.end());
    return std::nullopt;
  };
  if (spec.source.pod_selector) {
    if (auto stop = matched(*spec.source.pod_selector, spec.source.container, true, 0)) return *stop;
  }
  for (std::uint32_t i = 0; i < spec.targets.size(); ++i) {
    if (!spec.targets[i].pod_selector) continue;
    if (auto stop = matched(*spec.targets[i].pod_selector, spec.targets[i].container, false, i)) return *stop;
  }
  auto over = with_pods(spec, r.pods);
  if (!over) {
    return PodResolution{
        PodResolution::Verdict::Fail,
        reason::kInvalidSpec,
        "over the pods its selectors picked, the job breaks a rule of its spec: " + over.error().message,
        {}};
  }
  r.spec = std::move(*over);
  return r;
}

Result<TransferJobSpec> with_pods(const TransferJobSpec& spec, const std::vector<PodPick>& pods) {
  TransferJobSpec out = spec;
  if (spec.source.pod_selector) {
    const auto p =
        std::find_if(pods.begin(), pods.end(), [](const PodPick& p) { return p.source && p.selected; });
    if (p == pods.end())
      return make_error(ErrorCode::InvalidArgument, "no pod was picked for source.podSelector");
    out.source.node = p->node;
    out.source.pod = PodRef{p->name, p->uid, p->container_id};
    out.source.pod_selector.reset();
    if (spec.strategy == Strategy::Reshard) {
      for (const auto& pick : pods) {
        if (!pick.source || !pick.selected) continue;
        SourceSpec one = out.source;
        one.node = pick.node;
        one.pod = PodRef{pick.name, pick.uid, pick.container_id};
        out.sources.push_back(std::move(one));
      }
    }
  }
  out.targets.clear();
  for (std::uint32_t i = 0; i < spec.targets.size(); ++i) {
    const TargetSpec& t = spec.targets[i];
    if (!t.pod_selector) {
      out.targets.push_back(t);
      continue;
    }
    std::size_t picked = 0;
    for (const auto& p : pods) {
      if (p.source || p.entry != i || !p.selected) continue;
      TargetSpec one = t;
      one.pod_selector.reset();
      one.node = p.node;
      one.pod = PodRef{p.name, p.uid, p.container_id};
      out.targets.push_back(std::move(one));
      ++picked;
    }
    if (picked == 0)
      return make_error(ErrorCode::InvalidArgument,
                        "no pod was picked for targets[" + std::to_string(i) + "]");
  }
  if (out.strategy == Strategy::PointToPoint && out.targets.size() != 1) {
    return make_error(ErrorCode::InvalidArgument,
                      "strategy PointToPoint needs exactly one target, and the podSelector picked " +
                          std::to_string(out.targets.size()) + " pods; use Fanout or Chain");
  }
  if (out.targets.size() > 64) {
    return make_error(ErrorCode::InvalidArgument, "the selectors picked " +
                                                      std::to_string(out.targets.size()) +
                                                      " targets, more than the 64 a job may have");
  }
  if (out.targets.size() == 1 && out.strategy != Strategy::Reshard) out.strategy = Strategy::PointToPoint;
  if (auto ok = out.check_resolved(); !ok) return ok.error();
  return out;
}

json pods_status(const std::vector<PodPick>& pods) {
  json out = json::array();
  for (const auto& p : pods) out.push_back(p.to_json(/*with_entry=*/false));
  return out;
}

}  // namespace conduit::controller
