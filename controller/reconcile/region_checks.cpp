// What the reconciler checks of a region an agent described, before it grants or moves a byte.
#include "region_checks.h"

namespace conduit::controller {

// The agent's errors as reasons. NotFound and AlreadyExists depend on what was asked, so callers say.
std::string reason_for(const Error& e) {
  switch (e.code) {
    case ErrorCode::PeerUnreachable:
      return reason::kPeerUnreachable;
    case ErrorCode::ResourceExhausted:
      return reason::kInsufficientMemory;
    case ErrorCode::Unsupported:
      return reason::kUnsupported;
    case ErrorCode::InvalidArgument:
      return reason::kInvalidSpec;
    case ErrorCode::Forbidden:  // 403, TLS trust: the agent refuses who asks or what (tenancy, identity)
      return reason::kRemoteAccessDenied;
    case ErrorCode::RemoteAccess:  // 401: credentials it does not take now (a token mid-rotation)
      return reason::kAccessLost;
    default:
      return reason::kAgentError;
  }
}

std::string on(const std::string& node) { return " on node \"" + node + "\""; }

// A job reaches only its own namespace's regions and those shared with it; the agent checks again.
std::optional<std::string> not_shared(const api::Region& r, const std::string& what,
                                      const std::string& job_ns) {
  if (r.admits(job_ns)) return std::nullopt;
  return what + " belongs to namespace " + r.ns + ", which does not share it with namespace " + job_ns +
         " (the region's sharedWith: docs/security.md)";
}

// A pod's region belongs to the pod: a podSelector job's region must be one its pod shared with the agent
// (importedBy.podUID, which the agent reads from the process's cgroup), and a region a pod shared is reached
// only through a podSelector that picks that pod. The agent checks both again (agent/src/tenancy.h).
std::optional<Reconciler::AttemptError> pod_ownership(const api::Region& r, const std::string& what,
                                                      const std::string& job_ns,
                                                      const std::optional<PodRef>& pod) {
  // importedBy as the agent wrote it: {pid, uid, podUID?, containerID?}; anything else reads as absent.
  const auto field = [&r](const char* key) {
    const auto& by = r.imported_by;
    if (!by.is_object() || !by.contains(key)) return std::string();
    return by[key].is_string() ? by[key].get<std::string>() : by[key].dump();
  };
  const std::string uid = field("podUID");
  auto refuse = [](const char* reason, std::string message) {
    return Reconciler::AttemptError{reason, std::move(message), /*permanent=*/true};
  };
  const bool admitted = api::pod_admits(uid, job_ns, pod ? pod->uid : "");
  if (!pod) {
    if (admitted) return std::nullopt;
    return refuse(
        reason::kRegionOwnedByPod,
        what + " was shared by pod UID " + uid +
            ": a TransferJob reaches it only through a podSelector that picks that pod (docs/pods.md)");
  }
  if (admitted) {
    // The pod's: with a container named, that container's too (the agent knows pods, not containers).
    if (pod->container_id.empty() || field("containerID") == pod->container_id) return std::nullopt;
    return refuse(reason::kRegionNotOwnedByPod, what + " was shared by another container of pod " +
                                                    pod->name + " than the one the job names (container ID " +
                                                    pod->container_id + ")");
  }
  const std::string maker = !r.imported_by.is_object() ? "the agent's API"
                            : uid.empty()              ? "process " + field("pid") + ", which runs in no pod"
                                                       : "another pod (UID " + uid + ")";
  return refuse(reason::kRegionNotOwnedByPod, what + " was not shared by pod " + pod->name + " (UID " +
                                                  pod->uid + ") but made by " + maker);
}

std::string missing(const std::string& what, const std::optional<PodRef>& pod) {
  if (!pod) return what + " does not exist";
  return what + " does not exist: pod " + pod->name + " has not shared it (yet)";
}

}  // namespace conduit::controller
