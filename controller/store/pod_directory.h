// Where podSelector jobs find their pods (controller/reconcile/pods.h): the Kubernetes API server in
// Kubernetes mode (controller/kube/kube_pod_directory.h); local mode has no pods and no directory.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::controller {

class PodDirectory {
 public:
  virtual ~PodDirectory() = default;
  // The pods of namespace `ns` that `label_selector` (the API server's syntax) matches, as v1 Pod objects.
  virtual Result<std::vector<nlohmann::json>> list_pods(const std::string& ns,
                                                        const std::string& label_selector) = 0;
};

}  // namespace conduit::controller
