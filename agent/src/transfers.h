// Transfers this agent runs as the source: a range of one local region moved into granted ranges on other
// nodes. Each runs on its own thread as a TransferRun (transfer_run.h): register the source range, move it
// in segments (a failed segment is retried a bounded number of times and the transfer resumes from the last
// completed one), optionally compare per-slice CRC32C with each target agent and re-send only mismatching
// slices. Slice: the chunkBytes unit on the wire (one RMA operation); segment: one batch of slices, the
// unit of retry and resume.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "conduit/api/agent_client.h"
#include "conduit/api/reasons.h"
#include "conduit/transport.h"
#include "regions.h"
#include "scatter.h"
#include "stream/landing.h"
#include "transport_set.h"

namespace conduit::metrics {
class AgentMetrics;
}

namespace conduit::agent {

struct TransferTarget {
  RemoteKey grant;                  // the target's grant key
  std::uint64_t offset = 0;         // into the granted range
  std::string url;                  // target agent, for verify (optional otherwise)
  std::string region;               // target region name, for verify
  std::uint64_t region_offset = 0;  // where the granted range starts in that region
  // Bytes [0, resume_offset) of the range are already at the target (an earlier transfer's committedBytes):
  // sending starts there. verify: crc32c still checks the whole range and re-sends what differs, so a wrong
  // claim costs time, never correctness; without verify the caller vouches for those bytes.
  std::uint64_t resume_offset = 0;
  // A target that takes landing reports (stream/landing.h): its grant's id. Reports go to url.
  std::string grant_id;
  // The grant is a ring of this many bytes in front of a file (no region): range offset X lands at
  // X % ring_bytes. 0: not a ring.
  std::uint64_t ring_bytes = 0;
  bool save = false;  // the grant saves a file as bytes land: commit it once every byte did
  // Revoke grant_id at url once the transfer ended, however it ended, before the end shows: a grant made for
  // this one transfer then holds its region no longer than the transfer, whether anyone waits for it or not.
  bool release_grant = false;
};

enum class Verify : std::uint8_t { None, Crc32c };

struct TransferRequest {
  std::string source_region;
  std::string source_file;  // instead of a region: a file under the data directory, read as it goes out
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // 0 = to the end of the region
  std::vector<TransferTarget> targets;
  OpKind op = OpKind::Write;
  std::uint64_t chunk_bytes = 1u << 20;
  std::uint32_t window = 16;
  Verify verify = Verify::None;
  std::chrono::seconds deadline{0};  // 0 = none
  // 0 = unlimited. A cap so copying a checkpoint does not starve the training job's own traffic on the NIC.
  std::uint64_t max_bytes_per_second = 0;
  // Chain (docs/broadcast.md): the targets are hops in order; this agent writes the first, and each later
  // hop is fed by the nearest hop before it that still answers, which forwards what lands on it.
  bool chain = false;
  // A hop's forwarding transfer: the source region is being written through this grant of this agent, and
  // each segment is read only once it has landed there (and been verified). Resolved by the API into
  // `follow` before the transfer starts.
  std::string follow_grant;
  struct Follow {
    std::shared_ptr<const Landing> landing;
    std::function<bool()> granted;  // the grant still exists (not revoked or expired)
  };
  std::optional<Follow> follow;
  // Scatter-gather (scatter.h): many ranges between the source region and one target's grant, as one batch
  // on the transport, run by the agent's scatter executor with no thread of its own. Empty: one range.
  std::vector<ScatterOp> ops;
  // Who asked for it when that was an agent (rest/identity.h), which may then look at it and cancel it; not
  // on the wire. Empty: the controller or an operator.
  std::string requested_by;
  // The job's namespace (tenancy.h): the source region must admit it. "" = an operator's own.
  std::string job_namespace;
  // The pod a podSelector job addressed as its source (tenancy.h): the source region must be one it shared.
  std::string source_pod;

  // Strict: unknown fields, wrong types, zero/oversized values are InvalidArgument naming the field.
  static Result<TransferRequest> from_json(const nlohmann::json& body);
};

enum class TransferState : std::uint8_t { Queued, Running, Succeeded, Failed, Cancelled };
// Succeeded, Failed or Cancelled: the transfer will not change again.
inline bool ended(TransferState s) { return s != TransferState::Queued && s != TransferState::Running; }
std::string_view to_string(TransferState state);

// Reason codes a caller can act on (the controller copies them into TransferJob conditions).
namespace reason = api::reason;  // conduit/api/reasons.h

struct TargetStatus {
  TransferState state = TransferState::Queued;
  std::uint64_t bytes_done = 0;
  std::uint64_t committed_bytes = 0;  // [0, this) has landed at the target: where a later transfer may resume
  std::string last_error;
  // The target's range is a host staging buffer in front of CUDA memory (its key says so): each piece is
  // copied to the device by the target agent before it counts as landed.
  bool staged = false;
};

// Seconds each stage of the pipeline was busy, over all targets: reading the source (a file's reads, and
// CRC32C as bytes pass), the wire (batches in flight), landing (the targets' checks and saves, as the
// source waited for their reports) and the final commit (fsync and rename). Stages overlap, so they add up
// to more than the wall time; the largest is what the transfer ran at.
struct StageSeconds {
  double read = 0;
  double wire = 0;
  double land = 0;
  double commit = 0;
};

struct TransferStatus {
  std::string id;
  TransferState state = TransferState::Queued;
  std::uint64_t bytes_total = 0;  // length x targets
  std::uint64_t bytes_done = 0;
  double throughput_bytes_per_second = 0;
  std::uint32_t retries = 0;
  std::uint32_t slices_resent = 0;  // after a checksum mismatch
  bool verified = false;
  // How the source region is reached: "none" (host memory), "dmabuf" / "peermem" (CUDA memory registered
  // with the NIC), "staged" (CUDA memory through pinned host bounce buffers).
  std::string gpu_path = "none";
  // The NICs the source's registrations use (the rails nearest its memory, conduit/rail_choice.h); empty
  // where the transport's rails name no NIC (tcp, shm).
  std::vector<std::string> source_nics;
  std::string reason;   // set when Failed or Cancelled
  std::string message;  // human text for reason
  std::vector<TargetStatus> targets;
  StageSeconds stages;
  std::string requested_by;   // TransferRequest's; not shown
  std::string job_namespace;  // TransferRequest's; not shown
  std::chrono::system_clock::time_point created_at;
  std::optional<std::chrono::system_clock::time_point> started_at;
  std::optional<std::chrono::system_clock::time_point> finished_at;

  // {id, state, bytesTotal, bytesDone, throughputBytesPerSecond, retries, slicesResent, verified, gpuPath,
  //  sourceNics, reason, message, targets: [{state, bytesDone, committedBytes, lastError, staged}],
  //  stages: {readSeconds, wireSeconds, landSeconds, commitSeconds}, createdAt, startedAt, finishedAt}
  nlohmann::json to_json() const;
};

struct TransferOptions {
  std::uint32_t max_segment_retries = 3;
  std::uint64_t segment_bytes = 64u << 20;   // unit of retry and resume
  std::uint64_t pipeline_bytes = 64u << 20;  // a file source's read-ahead slots together (--pipeline-bytes)
  std::chrono::milliseconds stall_timeout{30000};
  // Finished transfers kept for GET: the newest `history` always, any younger than `history_min_age` too
  // (a controller polling many jobs late must still find how each ended: 1,000 jobs at once outran a
  // plain count of 256), and never more than `history_max`.
  std::size_t history = 256;
  std::chrono::seconds history_min_age{600};
  std::size_t history_max = 16384;
  // --namespace-files: a job's source file is opened beneath its namespace's directory (tenancy.h).
  bool namespace_files = false;
};

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
  Result<std::string> start(TransferRequest request);
  Result<TransferStatus> get(const std::string& id) const;
  // get(), once the transfer ended or `wait` passed (the end wakes it at once): completion pushed to the
  // caller instead of polled.
  Result<TransferStatus> wait(const std::string& id, std::chrono::milliseconds wait) const;
  std::vector<TransferStatus> list() const;  // newest first
  Status cancel(const std::string& id);      // NotFound; finished transfers stay as they ended
  std::size_t active() const;

  // Stops accepting work, fails running transfers with AgentShuttingDown and joins their threads within
  // `grace`, releasing every registration.
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  void run(const std::shared_ptr<TransferRun>& transfer);
  // The end of every transfer, threaded or not: state, history, metrics, log; wakes wait()ers.
  void finish(const std::shared_ptr<TransferRun>& transfer, std::optional<run::Failure> failure,
              bool threaded);
  Result<std::string> start_scatter(TransferRequest request);
  Result<std::string> admit(const std::shared_ptr<TransferRun>& t, const std::string& source_name,
                            bool threaded);
  void reap_threads();

  const TransportSet& transports_;
  RegionStore& regions_;
  const api::ClientOptions& peers_;  // how to reach the target agents each request names
  metrics::AgentMetrics* metrics_;
  TransferOptions options_;

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
