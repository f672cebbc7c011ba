// What the reconciler checks of a region an agent described before it grants or moves a byte (attempt.cpp,
// reshard.cpp), and the agent's errors as condition reasons.
#pragma once

#include <optional>
#include <string>

#include "conduit/api/wire.h"
#include "reconciler.h"

namespace conduit::controller {

// The agent's errors as reasons. NotFound and AlreadyExists depend on what was asked, so callers say.
std::string reason_for(const Error& e);

// " on node \"NODE\"", for messages.
std::string on(const std::string& node);

// A job reaches only its own namespace's regions and those shared with it; the agent checks again.
std::optional<std::string> not_shared(const api::Region& r, const std::string& what,
                                      const std::string& job_ns);

// A pod's region belongs to the pod: a podSelector job's region must be one its pod shared with the agent
// (importedBy.podUID, which the agent reads from the process's cgroup), and a region a pod shared is reached
// only through a podSelector that picks that pod. The agent checks both again (agent/src/tenancy.h).
std::optional<Reconciler::AttemptError> pod_ownership(const api::Region& r, const std::string& what,
                                                      const std::string& job_ns,
                                                      const std::optional<PodRef>& pod);

// "<what> does not exist", saying so of a pod's region as its pod not having shared it (yet).
std::string missing(const std::string& what, const std::optional<PodRef>& pod);

}  // namespace conduit::controller
