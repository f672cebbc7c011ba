// controller::PodDirectory over the API server: one LIST per question, filtered by the server
// (labelSelector), so the controller needs only `list` on pods (the chart's RBAC) and holds no cache of every
// pod in the cluster. Jobs ask when they start and, while held for a Ready pod, once a second.
#pragma once

#include "controller/store/pod_directory.h"
#include "kube_client/client.h"

namespace conduit::kube {

class KubePodDirectory : public controller::PodDirectory {
 public:
  explicit KubePodDirectory(kube_client::KubeClient& client) : client_(client) {}
  Result<std::vector<nlohmann::json>> list_pods(const std::string& ns,
                                                const std::string& label_selector) override;

 private:
  kube_client::KubeClient& client_;
};

}  // namespace conduit::kube
