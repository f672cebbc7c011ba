// The seam between the TransferJob reconciler and wherever the objects live: a Kubernetes API server
// (controller/kube/) or a directory of YAML files (local mode). Objects travel as the JSON the API server
// speaks (apiVersion, kind, metadata, spec, status), so the reconciler is the same code in both worlds.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::controller {

struct ObjectKey {
  std::string ns;  // empty for cluster-scoped objects (FabricNode)
  std::string name;
  bool operator==(const ObjectKey&) const = default;
  bool operator<(const ObjectKey& o) const { return ns != o.ns ? ns < o.ns : name < o.name; }
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // TransferJobs (conduit.dev/v1alpha1) this controller is responsible for.
  virtual Result<std::vector<nlohmann::json>> list_jobs() = 0;
  virtual Result<nlohmann::json> get_job(const ObjectKey& key) = 0;  // NotFound when gone
  // JSON merge patch of the status subresource; retried on conflict inside. Returns the stored object.
  virtual Result<nlohmann::json> patch_job_status(const ObjectKey& key, const nlohmann::json& status) = 0;
  // JSON merge patch of metadata (finalizers, annotations).
  virtual Result<nlohmann::json> patch_job_metadata(const ObjectKey& key, const nlohmann::json& metadata) = 0;
  virtual Status delete_job(const ObjectKey& key) = 0;  // ttlSecondsAfterFinished

  // FabricNodes (cluster-scoped): created when missing, status replaced.
  virtual Status upsert_node(const std::string& name, const nlohmann::json& spec,
                             const nlohmann::json& status) = 0;

  // A user-visible event on a job (kubectl describe); best effort.
  virtual void record_event(const ObjectKey& key, const std::string& type, const std::string& reason,
                            const std::string& message) = 0;

  // Blocks until some job changed (or `timeout` passed) and returns the keys that changed; the reconciler
  // also re-lists periodically, so a missed notification costs latency, never correctness.
  virtual std::vector<ObjectKey> wait_for_changes(std::chrono::milliseconds timeout) = 0;
  // Makes the wait_for_changes under way return now, or else the next one: a control loop that stops should
  // not sit out the rest of its wait. A store may ignore it (its waits then end at their timeout).
  virtual void wake() {}
};

}  // namespace conduit::controller
