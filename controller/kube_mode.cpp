#include "kube_mode.h"

#include <atomic>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "conduit/common/log.h"
#include "controller/kube/agent_signer.h"
#include "controller/kube/kube_list_watch.h"
#include "controller/kube/kube_pod_directory.h"
#include "controller/kube/kube_store.h"
#include "controller/kube/leader_election.h"
#include "controller/kube/signer_ca.h"
#include "controller/kube/watcher.h"
#include "discovery.h"
#include "kube_client/client.h"
#include "kube_client/kube_config.h"
#include "metrics_server.h"
#include "reconcile/control_loop.h"
#include "reconcile/reconciler.h"

namespace conduit::controller {
namespace {

constexpr int kUsageError = 2;
constexpr std::chrono::seconds kSyncTimeout{60};

// What the reconciling half reads and writes through while leader election runs: a replica that is not sure
// it still leads (no renewal within the renew deadline, on its own clock) neither reads a job to reconcile
// nor writes anything. The elector notices a lost Lease only at its next retry; a replica frozen past its
// lease (SIGSTOP, a VM pause) resumes with reconciles under way and a stale cache, and without this wrote
// status for up to that long after another replica had taken over.
class LeaderOnlyStore : public ObjectStore {
 public:
  LeaderOnlyStore(ObjectStore& store, std::function<bool()> leading)
      : store_(store), leading_(std::move(leading)) {}

  Result<std::vector<nlohmann::json>> list_jobs() override {
    if (!leading_()) return not_leading();
    return store_.list_jobs();
  }
  Result<nlohmann::json> get_job(const ObjectKey& key) override {
    if (!leading_()) return not_leading();
    return store_.get_job(key);
  }
  Result<nlohmann::json> patch_job_status(const ObjectKey& key, const nlohmann::json& status) override {
    if (!leading_()) return not_leading();
    return store_.patch_job_status(key, status);
  }
  Result<nlohmann::json> patch_job_metadata(const ObjectKey& key, const nlohmann::json& metadata) override {
    if (!leading_()) return not_leading();
    return store_.patch_job_metadata(key, metadata);
  }
  Status delete_job(const ObjectKey& key) override {
    if (!leading_()) return not_leading();
    return store_.delete_job(key);
  }
  Status upsert_node(const std::string& name, const nlohmann::json& spec,
                     const nlohmann::json& status) override {
    if (!leading_()) return not_leading();
    return store_.upsert_node(name, spec, status);
  }
  void record_event(const ObjectKey& key, const std::string& type, const std::string& reason,
                    const std::string& message) override {
    if (leading_()) store_.record_event(key, type, reason, message);
  }
  std::vector<ObjectKey> wait_for_changes(std::chrono::milliseconds timeout) override {
    return store_.wait_for_changes(timeout);
  }
  void wake() override { store_.wake(); }

 private:
  static Error not_leading() {
    return make_error(ErrorCode::Unavailable,
                      "not acting: no Lease renewal within the renew deadline (another replica may lead)");
  }
  ObjectStore& store_;
  std::function<bool()> leading_;
};

// The reconciling half of the controller, started when we may act (always, or while we lead) and stopped
// when we may not. A fresh Reconciler per term: its in-memory state must not outlive a term in which another
// replica may have moved the jobs on.
class Acting {
 public:
  Acting(ObjectStore& store, AgentApi& agents, FabricFacts& facts, PodDirectory& pods,
         ControlLoopOptions options, std::function<bool()> leading)
      : store_(store),
        agents_(agents),
        facts_(facts),
        pods_(pods),
        options_(std::move(options)),
        leading_(std::move(leading)) {}
  ~Acting() { stop(); }

  void start() {
    std::lock_guard lock(mu_);
    if (controller_) return;
    ReconcilerOptions reconciler_options;
    reconciler_options.may_act = leading_;
    reconciler_options.facts = &facts_;
    reconciler_options.pods = &pods_;
    reconciler_ = std::make_unique<Reconciler>(store_, agents_, system_clock(), reconciler_options);
    controller_ = std::make_unique<ControlLoop>(store_, *reconciler_, options_);
    controller_->start();
    active_ = true;
    log::info("reconciling started");
  }
  // Returns once the reconcile in progress has finished: nothing writes for us after this.
  void stop() {
    std::lock_guard lock(mu_);
    if (!controller_) return;
    active_ = false;
    controller_->stop();
    controller_.reset();
    reconciler_.reset();
    log::info("reconciling stopped");
  }
  bool active() const { return active_; }
  std::size_t queue_depth() {
    std::lock_guard lock(mu_);
    return controller_ ? controller_->queue_depth() : 0;
  }

 private:
  ObjectStore& store_;
  AgentApi& agents_;
  FabricFacts& facts_;
  PodDirectory& pods_;
  ControlLoopOptions options_;
  std::function<bool()> leading_;
  std::mutex mu_;
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<ControlLoop> controller_;
  std::atomic<bool> active_{false};
};

// The agents from the EndpointSlices of the agent Service, kept in `directory` next to the static --agents
// ones (a discovered node overrides a static one of the same name; when it goes, the static one is back).
class SliceDiscovery {
 public:
  SliceDiscovery(kube_client::KubeClient& client, const std::string& ns, const std::string& service,
                 const AgentDirectory& fixed, AgentDirectory& directory)
      : fixed_(fixed),
        directory_(directory),
        source_(client,
                kube_client::Resource{"discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", true}, ns,
                "kubernetes.io/service-name=" + service),
        watcher_(source_, [this](const std::vector<ObjectKey>&) { rebuild(); }) {}
  ~SliceDiscovery() { watcher_.stop(); }

  void start() { watcher_.start(); }
  bool wait_synced(std::chrono::milliseconds timeout) { return watcher_.wait_synced(timeout); }

 private:
  void rebuild() {
    std::map<std::string, std::string> found;
    try {
      found = agents_from_endpoint_slices(watcher_.objects());
    } catch (const std::exception& e) {
      // The API server validates slices, so this is not expected; never let it end the watch thread.
      log::warn("reading the agent EndpointSlices failed", {{"error", e.what()}});
      return;
    }
    std::lock_guard lock(mu_);
    for (const auto& node : discovered_) {
      if (found.count(node) > 0) continue;
      if (auto url = fixed_.url(node)) {
        directory_.set(node, *url);
      } else {
        directory_.remove(node);
      }
      log::info("agent gone from the EndpointSlices", {{"node", node}});
    }
    for (const auto& [node, url] : found) {
      if (directory_.url(node) != url) log::info("agent discovered", {{"node", node}, {"url", url}});
      directory_.set(node, url);
    }
    discovered_.clear();
    for (const auto& [node, url] : found) discovered_.insert(node);
  }

  const AgentDirectory& fixed_;
  AgentDirectory& directory_;
  kube::KubeListWatch source_;
  kube::Watcher watcher_;
  std::mutex mu_;
  std::set<std::string> discovered_;
};

}  // namespace

int run_kube_mode(const ControllerConfig& settings, const sigset_t& signals) {
  const KubeModeOptions& options = settings.kube;
  auto config = kube_client::load_default_config(options.kubeconfig);
  if (!config) {
    std::cerr << "conduit-controller: Kubernetes config: " << config.error().message << "\n";
    return kUsageError;
  }
  if (!options.agent_signer_cert.empty()) {
    // The signer re-reads the files at every signing; this only refuses to start with a pair that could
    // never sign (the key not the certificate's, or not a CA).
    if (auto ca = kube::SignerCa::load(options.agent_signer_cert, options.agent_signer_key); !ca) {
      std::cerr << "conduit-controller: " << ca.error().message << "\n";
      return kUsageError;
    }
  }
  kube_client::KubeClient client(*config);
  kube::KubeStoreOptions store_options;
  store_options.namespaces = options.namespaces;
  kube::KubeObjectStore store(client, store_options);

  // The directory the agent client reads: the static agents, then whatever the EndpointSlices add.
  const AgentDirectory fixed(settings.agents);
  AgentDirectory directory(settings.agents);
  std::unique_ptr<SliceDiscovery> slices;
  if (!options.agent_service.empty()) {
    const std::string ns =
        options.agent_service_namespace.empty() ? config->ns : options.agent_service_namespace;
    slices = std::make_unique<SliceDiscovery>(client, ns, options.agent_service, fixed, directory);
  }
  HttpAgentApi agents(directory, settings.agent_client);
  // Set once leader election has started; until then, and without --leader-elect, we may always act.
  std::atomic<kube::LeaderElector*> leader{nullptr};
  const auto leading = [&leader] {
    const kube::LeaderElector* elector = leader.load();
    return elector == nullptr || elector->is_leader();
  };
  LeaderOnlyStore acting_store(store, leading);
  // Reconciles report into the metrics through this pointer; the one path out after the controller starts
  // stops it explicitly before the metrics go away.
  std::atomic<bool> ready{false};
  MetricsServer* metrics_sink = nullptr;
  ControlLoopOptions controller_options;
  controller_options.on_reconciled = [&metrics_sink](double seconds, const char* error) {
    if (metrics_sink != nullptr) metrics_sink->reconciled(seconds, error);
  };
  FabricFacts facts;  // discovery's, read before each attempt
  kube::KubePodDirectory pods(client);
  Acting acting(acting_store, agents, facts, pods, controller_options, leading);
  std::unique_ptr<kube::AgentSigner> signer;
  if (!options.agent_signer_cert.empty()) {
    kube::AgentSignerOptions signer_options;
    signer_options.ca_cert_file = options.agent_signer_cert;
    signer_options.ca_key_file = options.agent_signer_key;
    signer_options.agent = {options.agent_service_account_namespace, options.agent_service_account_name};
    signer_options.max_lifetime = options.agent_certificate_max;
    signer_options.may_act = leading;
    signer = std::make_unique<kube::AgentSigner>(client, signer_options);
  }
  MetricsServer metrics(
      ready,
      [&acting, &leader] {
        const kube::LeaderElector* elector = leader.load();
        return acting.active() && (elector == nullptr || elector->is_leader());
      },
      [&acting] { return acting.queue_depth(); }, store);
  metrics_sink = &metrics;
  if (!settings.metrics_listen.empty()) {
    std::string error;
    if (!metrics.listen(settings.metrics_listen, error)) {
      std::cerr << "conduit-controller: " << error << "\n";
      return kUsageError;
    }
  }

  log::info("conduit-controller started", {{"mode", "kubernetes"},
                                           {"server", config->server},
                                           {"agents", std::to_string(settings.agents.size())},
                                           {"agentService", options.agent_service},
                                           {"leaderElect", options.leader_elect ? "true" : "false"},
                                           {"agentSigner", signer ? "true" : "false"}});
  store.start();
  if (slices) slices->start();
  // Waits in short steps so SIGTERM during a slow first LIST still stops us promptly.
  const auto sync_deadline = std::chrono::steady_clock::now() + kSyncTimeout;
  bool synced = false;
  while (!synced && std::chrono::steady_clock::now() < sync_deadline) {
    synced = store.wait_synced(std::chrono::milliseconds(200)) &&
             (!slices || slices->wait_synced(std::chrono::milliseconds(200)));
    const timespec now{0, 0};
    if (const int sig = sigtimedwait(&signals, nullptr, &now); sig == SIGTERM || sig == SIGINT) {
      log::info("stopping before the caches synced");
      slices.reset();
      store.stop();
      return 0;
    }
  }
  if (!synced) {
    std::cerr << "conduit-controller: the TransferJob caches did not sync within " << kSyncTimeout.count()
              << " s (is the TransferJob CRD installed, and may we list it and EndpointSlices?)\n";
    slices.reset();
    store.stop();
    return 1;
  }
  ready = true;

  std::unique_ptr<kube::LeaderElector> elector;
  if (options.leader_elect) {
    kube::LeaderElectionConfig election;
    election.lease_namespace = options.lease_namespace;
    election.lease_name = options.lease_name;
    election.lease_duration = options.lease_duration;
    election.renew_deadline = options.renew_deadline;
    election.retry_period = options.retry_period;
    // The signer, like reconciling, is the leader's alone: two signers would race to decide the same CSR.
    election.on_started_leading = [&acting, &signer] {
      acting.start();
      if (signer) signer->start();
    };
    // Returns only when the last reconcile and signing have finished, so the next leader never races us.
    election.on_stopped_leading = [&acting, &signer] {
      if (signer) signer->stop();
      acting.stop();
    };
    elector = std::make_unique<kube::LeaderElector>(*config, election);
    leader = elector.get();
    log::info("waiting for leadership", {{"lease", options.lease_name}, {"identity", elector->identity()}});
    elector->start();
  } else {
    acting.start();
    if (signer) signer->start();
  }

  NodeDiscovery discovery(&facts);
  auto next_discovery = std::chrono::steady_clock::now();
  while (true) {
    const timespec tick{0, 200'000'000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      log::info("stopping", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
      break;
    }
    // Only the replica that reconciles writes FabricNodes: two writers would only fight over lastSeen.
    if (acting.active() && std::chrono::steady_clock::now() >= next_discovery) {
      discovery.run(agents, directory, acting_store);
      const auto [reachable, unreachable] = discovery.reachable_counts();
      metrics.set_nodes(reachable, unreachable);
      next_discovery = std::chrono::steady_clock::now() + kDiscoveryPeriod;
    }
  }
  // Stop reconciling before the Lease is released, then the watches; the endpoint goes last.
  if (elector) elector->stop(/*release=*/true);
  if (signer) signer->stop();
  acting.stop();
  slices.reset();
  store.stop();
  metrics.stop();
  log::info("conduit-controller stopped",
            {{"apiserverWriteConflicts", std::to_string(client.conflict_retries())}});
  return 0;
}

}  // namespace conduit::controller
