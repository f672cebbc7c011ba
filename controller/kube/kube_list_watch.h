// ListWatchSource over the API server: LIST and WATCH of one resource in one namespace (or all).
#pragma once

#include <string>

#include "kube_client/client.h"
#include "kube_client/resource.h"
#include "watch_source.h"

namespace conduit::kube {

class KubeListWatch : public ListWatchSource {
 public:
  // `ns` empty: all namespaces (or a cluster-scoped resource). `timeout_seconds` 0: a random 5–10 minutes per
  // stream, as client-go does, so that many watchers do not reconnect in step. `field_selector`: only the
  // objects the server says match it (for a field the resource supports, e.g. a CSR's spec.signerName).
  KubeListWatch(kube_client::KubeClient& client, kube_client::Resource resource, std::string ns,
                std::string label_selector = {}, int timeout_seconds = 0, std::string field_selector = {});

  Result<ListResult> list() override;
  kube_client::WatchEnd watch(const std::string& resource_version,
                              const std::function<bool(const WatchEvent&)>& on_event,
                              std::stop_token stop) override;

 private:
  kube_client::KubeClient& client_;
  kube_client::Resource resource_;
  std::string ns_;
  std::string label_selector_;
  int timeout_seconds_;
  std::string field_selector_;
};

}  // namespace conduit::kube
