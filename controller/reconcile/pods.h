// podSelector sources and targets: which pods a job's selectors pick when its first attempt starts, and the
// job as it then runs over them. The pick is a snapshot: kept in the run annotation and shown in status.pods,
// so every later attempt (and a restarted controller) runs over the same pods; pods that match later are not
// added. Pure: the reconciler lists the pods (PodDirectory) and carries out the verdict.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "transfer_job.h"

namespace conduit::controller {

// One pod a selector matched.
struct PodPick {
  std::string name;
  std::string uid;
  std::string node;
  bool source = false;  // the source's selector matched it; else that of spec.targets[entry]
  std::uint32_t entry = 0;
  std::string container_id;  // the selector's container, as the pod's containerStatuses name it
  bool selected = false;     // false: left out, `why` says why
  std::string why;

  // {name, uid, node, role: source|target, state: Selected|LeftOut, message?}: as status.pods lists it; the
  // run annotation keeps `entry` too.
  nlohmann::json to_json(bool with_entry) const;
  static std::optional<PodPick> from_json(const nlohmann::json& j);
  bool operator==(const PodPick&) const = default;
};

// Why a pod, as the API server lists it, cannot take part now (terminating, on no node, not Ready, or without
// a started `container` when one is named); "" when it can.
std::string why_left_out(const nlohmann::json& pod, const std::string& container = "");
// The runtime's ID of `container` in the pod's containerStatuses ("containerd://<id>" -> "<id>"); "" if none.
std::string container_id(const nlohmann::json& pod, const std::string& container);

struct PodResolution {
  enum class Verdict : std::uint8_t { Go, Wait, Fail };
  Verdict verdict = Verdict::Go;
  std::string reason;  // Wait: NoReadyPods, PodsUnknown; Fail: AmbiguousPodSelector, InvalidSpec, PodsUnknown
  std::string message;
  std::vector<PodPick> pods;              // Go: every pod matched, selected or left out
  std::optional<TransferJobSpec> spec{};  // Go: the job over the selected pods (with_pods)
};

// The pods of the job's namespace that a labelSelector query matches, as the API server lists them.
using ListPods = std::function<Result<std::vector<nlohmann::json>>(const std::string& label_selector)>;

// Picks the pods of `spec`'s selectors: the source's must match exactly one pod that can take part, each
// target selector at least one (none yet: Wait). Then the spec over them must keep every rule of a spec.
PodResolution resolve_pods(const TransferJobSpec& spec, const std::string& ns, const ListPods& list);

// `spec` over the picked pods: the source on its pod's node, each selector target by one target per selected
// pod in pod-name order, each the selector's region on that pod's node. A Fanout or Chain that came down to
// one target runs as PointToPoint. InvalidArgument when the result breaks a rule (PointToPoint given
// several pods, two pods' regions the same region).
Result<TransferJobSpec> with_pods(const TransferJobSpec& spec, const std::vector<PodPick>& pods);

// The status.pods list.
nlohmann::json pods_status(const std::vector<PodPick>& pods);

}  // namespace conduit::controller
