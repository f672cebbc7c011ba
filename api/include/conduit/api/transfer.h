// The bodies of the agent's transfer routes (agent/openapi.yaml): the TransferRequest a caller POSTs to
// /v1/transfers (one to_json for the controller and the CLI) and the TransferStatus every transfer route
// answers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace conduit::api {

struct TransferTarget {
  nlohmann::json key;               // the target's RemoteKey (Grant::key), as it came
  std::string url;                  // the target agent: needed for verify crc32c and for a staged grant
  std::string region;               // the target region, likewise
  std::uint64_t resume_offset = 0;  // bytes [0, this) are in place from an earlier transfer
  std::uint64_t offset = 0;         // into the granted range
  std::uint64_t region_offset = 0;  // where the granted range starts in the target region
  std::string grant_id{};           // set: the target takes landing reports (verify, save) at this grant
  std::uint64_t ring_bytes = 0;     // the grant is a ring of this size in front of a file
  bool save = false;                // the grant saves a file: the source commits it at the end
  bool release_grant = false;       // the source revokes grant_id at url when the transfer ends, any end
};

struct TransferRequest {
  std::string source_region;
  std::string source_file{};  // instead of source_region: a file under the source agent's data directory
  std::uint64_t offset = 0;   // into the source region
  std::uint64_t length = 0;   // 0: to the end of the source region
  std::vector<TransferTarget> targets;
  std::string op = "write";  // write: source -> targets; read: the one target -> source
  std::uint64_t chunk_bytes = 1u << 20;
  std::uint32_t window = 16;
  bool verify = false;                     // crc32c
  std::uint64_t deadline_seconds = 0;      // 0: none
  std::uint64_t max_bytes_per_second = 0;  // per target; 0: unlimited
  bool chain = false;                      // strategy chain: the targets are hops in order
  std::string follow_grant{};              // a hop forwarding what lands in source_region through this grant
  // Scatter-gather: ranges between source_region and the one target's grant (then no offset or length).
  struct RangeOp {
    std::uint64_t source_offset = 0;
    std::uint64_t target_offset = 0;
    std::uint64_t length = 0;
  };
  std::vector<RangeOp> ops{};
  std::string ns{};          // the job's namespace: the source region must belong to it or be shared with it
  std::string source_pod{};  // the UID of the pod the job addressed: the source region must be its own
  nlohmann::json to_json() const;
};

struct TransferStatus {
  struct Target {
    std::string state;
    std::uint64_t bytes_done = 0;
    std::string last_error;
    std::uint64_t committed_bytes = 0;  // [0, this) has landed at the target
    bool staged = false;                // the target's CUDA region was reached through a host staging buffer
  };
  std::string id;
  std::string state;  // Queued, Running, Succeeded, Failed, Cancelled
  std::uint64_t bytes_total = 0;
  std::uint64_t bytes_done = 0;
  double throughput = 0;  // bytes per second
  std::uint32_t retries = 0;
  bool verified = false;
  // How the source region was reached: none (host memory), dmabuf, peermem or staged (docs/gpu.md). ""
  // from an agent that does not say.
  std::string gpu_path;
  std::string reason;  // when Failed or Cancelled: conduit/api/reasons.h
  std::string message;
  std::vector<Target> targets;
  std::uint32_t slices_resent = 0;  // after a checksum mismatch
  std::vector<std::string> source_nics{};
  // Seconds each pipeline stage was busy (they overlap): reading the source, the wire, the targets' landing
  // checks and saves, the final commit.
  struct Stages {
    double read = 0;
    double wire = 0;
    double land = 0;
    double commit = 0;
  } stages{};
  std::string created_at{};  // RFC 3339, as the agent wrote them
  std::optional<std::string> started_at{};
  std::optional<std::string> finished_at{};

  bool finished() const { return state == "Succeeded" || state == "Failed" || state == "Cancelled"; }
  bool any_staged() const;  // either end of any target ran through host bounce or staging buffers
  static TransferStatus from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

}  // namespace conduit::api
