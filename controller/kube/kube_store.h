// controller::ObjectStore over a Kubernetes API server: TransferJobs come from LIST+WATCH caches (one Watcher
// per watched namespace, or one for all), writes go to the API server as merge patches, FabricNodes are
// upserted, Events recorded best effort.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "controller/store/object_store.h"
#include "event_recorder.h"
#include "kube_client/client.h"
#include "kube_list_watch.h"
#include "watcher.h"

namespace conduit::kube {

struct KubeStoreOptions {
  std::vector<std::string> namespaces;  // TransferJobs of these; none, or one "", means all namespaces
  std::string component = "conduit-controller";  // Event source
  std::string instance;                          // Event reportingInstance (the pod name); empty: hostname
  int watch_timeout_seconds = 0;                 // per stream; 0: 5–10 minutes at random
  WatcherOptions watcher;
};

class KubeObjectStore : public controller::ObjectStore {
 public:
  KubeObjectStore(kube_client::KubeClient& client, KubeStoreOptions options);
  ~KubeObjectStore() override;  // stops the watchers

  // Starts LIST+WATCH; until the first LIST lands, reads go to the API server directly.
  void start();
  void stop();
  bool wait_synced(std::chrono::milliseconds timeout);

  Result<std::vector<nlohmann::json>> list_jobs() override;
  // From the cache; a key the cache lacks is asked of the API server, so NotFound is the server's word.
  Result<nlohmann::json> get_job(const controller::ObjectKey& key) override;
  Result<nlohmann::json> patch_job_status(const controller::ObjectKey& key,
                                          const nlohmann::json& status) override;
  Result<nlohmann::json> patch_job_metadata(const controller::ObjectKey& key,
                                            const nlohmann::json& metadata) override;
  Status delete_job(const controller::ObjectKey& key) override;  // a job already gone counts as deleted
  Status upsert_node(const std::string& name, const nlohmann::json& spec,
                     const nlohmann::json& status) override;
  void record_event(const controller::ObjectKey& key, const std::string& type, const std::string& reason,
                    const std::string& message) override;
  std::vector<controller::ObjectKey> wait_for_changes(std::chrono::milliseconds timeout) override;

 private:
  struct NamespaceWatch {
    std::string ns;  // "" for all namespaces
    std::unique_ptr<KubeListWatch> source;
    std::unique_ptr<Watcher> watcher;
  };
  Watcher* watcher_for(const std::string& ns);
  std::optional<nlohmann::json> cached(const controller::ObjectKey& key);
  Result<nlohmann::json> patch_job(const controller::ObjectKey& key, const std::string& subresource,
                                   const nlohmann::json& patch);
  void on_change(const std::vector<controller::ObjectKey>& keys);

  kube_client::KubeClient& client_;
  KubeStoreOptions options_;
  std::vector<NamespaceWatch> watches_;
  EventRecorder events_;

  std::mutex changes_mutex_;
  std::condition_variable changes_cv_;
  std::set<controller::ObjectKey> pending_;

  // What our own last write of each job returned, until the watch delivers that version: the precondition
  // of the next patch. The watch lags our writes, and a reconcile often writes twice in a row (the run
  // annotation, then status); a hint from the cache alone made the second write a 409, a GET and a retry.
  std::mutex written_mutex_;
  std::map<controller::ObjectKey, nlohmann::json> written_;
};

}  // namespace conduit::kube
