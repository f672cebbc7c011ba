#include "kube_pod_directory.h"

namespace conduit::kube {

Result<std::vector<nlohmann::json>> KubePodDirectory::list_pods(const std::string& ns,
                                                                const std::string& label_selector) {
  kube_client::ListOptions options;
  options.label_selector = label_selector;
  auto list = client_.list(kube_client::resources::pods(), ns, options);
  if (!list) return list.error();
  std::vector<nlohmann::json> pods;
  if (list->contains("items") && (*list)["items"].is_array()) {
    for (auto& item : (*list)["items"]) pods.push_back(std::move(item));
  }
  return pods;
}

}  // namespace conduit::kube
