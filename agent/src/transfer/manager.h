// Transfers this agent runs as the source: a range of one local region moved into granted ranges on other
// nodes. Each runs on its own thread as a TransferRun (transfer/run.h): register the source range, move it
// in segments (a failed segment is retried a bounded number of times and the transfer resumes from the last
// completed one), optionally compare per-slice CRC32C with each target agent and re-send only mismatching
// slices. Slice: the chunkBytes unit on the wire (one RMA operation); segment: one batch of slices, the
// unit of retry and resume.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "conduit/api/agent_client.h"
#include "path/prover.h"
#include "regions.h"
#include "transfer/options.h"
#include "transfer/request.h"
#include "transfer/status.h"
#include "transport_set.h"

namespace conduit::metrics {
class AgentMetrics;
}

namespace conduit::agent {

class TransferRun;
class ScatterExecutor;
namespace run {
struct Failure;
}

class TransferManager {
 public:
  TransferManager(const TransportSet& transports, RegionStore& regions, const api::ClientOptions& peers,
                  metrics::AgentMetrics* metrics, TransferOptions options);
  ~TransferManager();  // shutdown()

  // Validates against local state (region exists, range fits, provider open) and starts; returns the id.
  Result<std::string> start(ResolvedRequest request);
  Result<TransferStatus> get(const std::string& id) const;
  // get(), once the transfer ended or `wait` passed (the end wakes it at once): completion pushed to the
  // caller instead of polled.
  Result<TransferStatus> wait(const std::string& id, std::chrono::milliseconds wait) const;
  std::vector<TransferStatus> list() const;  // newest first
  Status cancel(const std::string& id);      // NotFound; finished transfers stay as they ended
  std::size_t active() const;
  // From now on every transfer that runs on a thread of its own is judged from its NICs' counters
  // (docs/path.md). Before the first start(); without it no transfer says its path.
  void prove_paths(std::unique_ptr<path::Prover> prover) { prover_ = std::move(prover); }
  // The judged transfers' totals per NIC and verdict (path::Prover::totals), null without a prover.
  nlohmann::json path_totals() const { return prover_ ? prover_->totals() : nlohmann::json(nullptr); }

  // Stops accepting work, fails running transfers with AgentShuttingDown and joins their threads within
  // `grace`, releasing every registration.
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  void run(const std::shared_ptr<TransferRun>& transfer);
  // The end of every transfer, threaded or not: state, history, metrics, log; wakes wait()ers.
  void finish(const std::shared_ptr<TransferRun>& transfer, std::optional<run::Failure> failure,
              bool threaded);
  Result<std::string> start_scatter(ResolvedRequest request);
  // A scatter-gather transfer with verify crc32c whose batch ended well: a thread compares the two ends'
  // sums (scatter_verify.h) and ends it. Why it could not be started, or nullopt.
  std::optional<run::Failure> check_scatter(const std::shared_ptr<TransferRun>& t);
  Result<std::string> admit(const std::shared_ptr<TransferRun>& t, const std::string& source_name,
                            bool threaded);
  void reap_threads();

  const TransportSet& transports_;
  RegionStore& regions_;
  const api::ClientOptions& peers_;  // how to reach the target agents each request names
  metrics::AgentMetrics* metrics_;
  TransferOptions options_;
  std::unique_ptr<path::Prover> prover_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<TransferRun>> transfers_;
  std::map<std::uint64_t, std::string> finished_;  // the ended ones in transfers_: seq -> id, oldest first
  std::vector<std::thread> threads_;
  std::atomic<bool> shutting_down_{false};
  // "t-<8 random hex>-": ids read t-<run>-<n>, so a restarted agent never hands out an id an earlier run did
  // (a controller still holding that id would take another client's transfer for its own).
  const std::string id_prefix_;
  std::uint64_t next_id_ = 1;
  std::size_t running_ = 0;              // Queued or Running
  std::vector<std::thread::id> exited_;  // workers done but not yet joined
  std::condition_variable exited_cv_;
  mutable std::condition_variable ended_cv_;  // any transfer ended (wait())
  // Set by shutdown(): workers stop waiting for their cancelled batch by then.
  std::atomic<std::chrono::steady_clock::rep> shutdown_deadline_{
      std::chrono::steady_clock::time_point::max().time_since_epoch().count()};
  // Last: its thread calls finish(), so it stops before anything finish() uses goes.
  std::unique_ptr<ScatterExecutor> scatter_;
};

}  // namespace conduit::agent
