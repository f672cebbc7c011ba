// Kubernetes Events (core/v1) about objects, as `kubectl describe` shows them. A repeat of the same event
// (object, type, reason, message) bumps count and lastTimestamp of the Event already written, as client-go's
// correlator does, instead of piling up new objects. Best effort: failures are logged, never returned.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "kube_client/client.h"

namespace conduit::kube {

class EventRecorder {
 public:
  // `component` is source.component / reportingComponent; `instance` the reportingInstance (the pod).
  EventRecorder(kube_client::KubeClient& client, std::string component, std::string instance);

  // `involved` is the object the event is about (at least apiVersion, kind, metadata.name and namespace;
  // uid and resourceVersion when known). `type` is Normal or Warning; `reason` CamelCase.
  void record(const nlohmann::json& involved, const std::string& type, const std::string& reason,
              const std::string& message);

 private:
  struct Seen {
    std::string name;  // of the Event object written
    int count = 0;
  };
  void report_failure(const std::string& message);

  kube_client::KubeClient& client_;
  std::string component_;
  std::string instance_;
  std::mutex mutex_;
  std::map<std::string, Seen> seen_;
  std::atomic<bool> warned_{false};
};

}  // namespace conduit::kube
