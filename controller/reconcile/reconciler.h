// Carries out the steps decide() picks for one TransferJob: talks to the agents, records what it holds in the
// run annotation before it matters, and writes status (transitions at once, progress at most every
// min_status_interval). Restart-safe: everything it needs to pick up a job again is in the object itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "agent_api.h"
#include "clock.h"
#include "node_facts.h"
#include "preflight.h"
#include "step.h"
#include "store/object_store.h"
#include "store/pod_directory.h"
#include "transfer_watcher.h"

namespace conduit::controller {

struct ReconcilerOptions {
  std::chrono::milliseconds poll_interval{500};        // how often a running transfer is looked at
  std::chrono::milliseconds min_status_interval{500};  // progress writes: at most 2 per second per job
  std::chrono::milliseconds unreachable_grace{std::chrono::seconds(10)};
  // Grants outlive a controller that dies for good by at most this; a transfer longer than it restarts.
  std::uint32_t grant_ttl_seconds = 86400;
  // Asked before every step; false stops the reconcile there (as a read refused by the store). With leader
  // election, a reconcile under way when the replica froze must not act on agents after it thaws: its store
  // writes are refused anyway, but a step may call an agent before it writes.
  std::function<bool()> may_act;
  // What discovery learnt about the nodes (FabricNodes), checked before each attempt; null: nothing known,
  // every node is asked only when the attempt reaches it. Outlives the reconciler.
  FabricFacts* facts = nullptr;
  // Where podSelector jobs find their pods (Kubernetes mode); null: such jobs are Unsupported (local mode).
  PodDirectory* pods = nullptr;
  // How running transfers' ends are heard (transfer_watcher.h), once the control loop starts the watcher.
  TransferWatcherOptions watcher;
};

class Reconciler {
 public:
  Reconciler(ObjectStore& store, AgentApi& agents, Clock clock = system_clock(),
             ReconcilerOptions options = {});

  // Why an attempt could not start.
  struct AttemptError {
    std::string reason;
    std::string message;
    bool permanent = false;  // Fail now whatever the reason: retrying cannot help (a region over a whole cap)
  };

  // Why a reconcile did not get its job where it meant to (for conduit_controller_reconcile_errors_total).
  enum class Error : std::uint8_t { None, StoreRead, StoreWrite };

  // Moves the job one or more steps along. Returns when to look again without a change (nullopt: only
  // when it changes). Errors from the store leave the job as it was and ask for a retry; `error` says which.
  std::optional<std::chrono::milliseconds> reconcile(const ObjectKey& key, Error* error = nullptr);

  // Forgets in-memory state of jobs that are gone.
  void forget(const ObjectKey& key) {
    watcher_.unwatch(key);
    std::lock_guard lock(memory_mu_);
    memory_.erase(key);
  }

  // Hears the ends of the transfers this reconciler started or follows; the control loop starts it (with
  // its queue) and stops it. Not started (a reconciler driven alone, as in tests), it watches nothing and
  // every end is seen by the reconciler's own looks.
  TransferWatcher& transfer_watcher() { return watcher_; }

 private:
  struct Memory {
    std::optional<TimePoint> last_status_write;
    std::optional<TimePoint> unreachable_since;
    std::optional<TimePoint> last_progress_log;
    std::vector<std::uint64_t> committed;  // per target, as the agent last reported it
    bool ending = false;  // the last look expected the transfer to end within a second: the next one waits
    std::optional<TimePoint> attempt_started;  // when this replica started the current attempt
    // Strategy Reshard: what the run annotation does not keep (reshard.cpp). Lost with a restart, when the
    // batches still running are followed to their end and a batch to send again restarts the attempt.
    struct Reshard {
      std::string fingerprint;                       // the plan these are of
      std::vector<std::vector<api::ScatterOp>> ops;  // per batch
      std::vector<api::Grant> grants;                // per target, as its agent answered (the keys)
    };
    std::optional<Reshard> reshard;
    std::map<std::string, TimePoint> batch_unreachable_since;  // by transfer id
  };
  struct Pass;

  bool run_step(Pass& p, const Step& step);  // true: decide again in this pass
  // Pre-flight (hold.cpp): the verdict on the nodes this attempt touches. Nodes whose facts say they do not
  // answer are asked again first (every node with `ask_all`), so one that is back runs the job at once.
  Preflight check_nodes(Pass& p, bool ask_all);
  std::optional<NodeFacts> facts_for(const Pass& p, const std::string& node, bool ask);
  // Keeps the job Pending (Running=False, PeerUnreachable or NoReadyPods) until what it waits for is there
  // or the deadline passes; spends no attempt.
  void hold(Pass& p, const Waiting& why);
  // podSelector: picks the pods at the first attempt (pods.h); the job runs over them from then on. nullopt:
  // picked, go on; else the job was held (false) or failed (true), which run_step returns.
  std::optional<bool> pick_pods(Pass& p);
  Observation observe(Pass& p);
  // Has the watcher long-poll the current transfer's end; false when it cannot (stopped, or at its bound).
  bool watch_end(const Pass& p);
  std::optional<AttemptError> start_attempt(Pass& p);
  // What every attempt does first: count it, release keys an earlier one could not revoke, status Running.
  void begin_attempt(Pass& p);
  // Strategy Reshard (reshard.cpp): read the pods' manifests and versions, plan, take one write grant per
  // target region, start every batch.
  std::optional<AttemptError> start_reshard(Pass& p);
  // Looks at the running batches and steps them (reshard_run.h): retries a failed one alone, commits every
  // target to one version once all landed, completes or fails the job.
  void track_reshard(Pass& p);
  // Starts `batches` (indices into run.reshard's) from their source pods' agents; false when the plan or the
  // grant keys are not in memory (a restarted controller), so the attempt must start again.
  bool start_batches(Pass& p, const std::vector<std::size_t>& batches);
  // Every target not yet committed to version K: false with an error when one cannot reach it.
  std::optional<AttemptError> commit_targets(Pass& p);
  void complete_reshard(Pass& p);
  // status.reshard, status.targets and the progress fields from run.reshard; `throughput`: the running
  // batches' together.
  void reshard_status(Pass& p, double throughput);
  bool streams_source(const Pass& p);
  std::optional<AttemptError> prepare_source(Pass& p);
  // The source's manifest into p.source_manifest when `source` (as its agent answered) names tensors.
  std::optional<AttemptError> read_source_manifest(Pass& p, const api::Region& source);
  // spec.tensors: the scatter batch into p.subset, planned against each target region's manifest (a region
  // the job creates gets the source's) before any region is created or byte moved.
  std::optional<AttemptError> plan_tensors(Pass& p);
  std::optional<AttemptError> prepare_targets(Pass& p);
  std::optional<AttemptError> take_grants(Pass& p);
  // The targets this attempt sends to: all but those that landed in an earlier one.
  static std::vector<std::uint32_t> targets_to_send(const Pass& p);
  // Targets the agent said Succeeded in the attempt that just ended count as landed (run.landed).
  void note_landed(Pass& p);
  std::optional<AttemptError> save_files(Pass& p);
  // spec.tensors: a scatter batch takes no landing reports, so the target region gets its new version here,
  // through the attempt's grant, once every op landed (and was verified).
  std::optional<AttemptError> commit_subset(Pass& p);
  void track(Pass& p, const api::TransferStatus& t);
  void complete(Pass& p, const api::TransferStatus& t);
  void fail(Pass& p, const std::string& reason, const std::string& message);
  void retry(Pass& p, const Step& step);
  void release(Pass& p, bool drop_source);  // cancel the transfer, revoke grants, maybe drop the temp source
  // A job that fails or is deleted before it succeeded deletes the target regions it created (they hold
  // partial bytes); a Succeeded job's regions stay: they are what the job was for.
  void drop_created_targets(Pass& p);
  void delete_region_when_free(Pass& p, const NodeRef& region);
  bool save_run(Pass& p);
  bool flush(Pass& p);

  ObjectStore& store_;
  AgentApi& agents_;
  Clock clock_;
  ReconcilerOptions options_;
  // Workers reconcile different jobs at once (never one job twice at once): the map is shared, each entry is
  // used by the one worker holding its job. std::map keeps entries in place while others are added.
  Memory& memory_for(const ObjectKey& key) {
    std::lock_guard lock(memory_mu_);
    return memory_[key];
  }
  std::mutex memory_mu_;
  std::map<ObjectKey, Memory> memory_;
  TransferWatcher watcher_;
};

// The name of the temporary region a file source is loaded into: unique per job, a DNS-1123 label.
std::string temporary_region_name(const nlohmann::json& job);

}  // namespace conduit::controller
