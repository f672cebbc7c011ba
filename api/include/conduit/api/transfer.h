// The bodies of the agent's transfer routes (agent/openapi.yaml): the TransferRequest a caller POSTs to
// /v1/transfers (to_json for the controller, the CLI and a Chain's hops; the strict from_json the agent
// reads it with) and the TransferStatus every transfer route answers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "conduit/api/manifest.h"
#include "conduit/api/transfer_path.h"
#include "conduit/common/op_kind.h"
#include "conduit/common/result.h"

namespace conduit::api {

// One target of a transfer: a grant on another agent (or this one) and where the bytes go in it.
struct TransferTarget {
  nlohmann::json grant;             // the target's RemoteKey (Grant::key), as it came: the agent reads it
  std::string url{};                // the target agent: needed for verify crc32c and for a staged grant
  std::string region{};             // the target region, likewise
  std::uint64_t resume_offset = 0;  // bytes [0, this) are in place from an earlier transfer
  std::uint64_t offset = 0;         // into the granted range
  std::uint64_t region_offset = 0;  // where the granted range starts in the target region
  std::string grant_id{};           // set: the target takes landing reports (verify, save) at this grant
  std::uint64_t ring_bytes = 0;     // the grant is a ring of this size in front of a file
  bool save = false;                // the grant saves a file: the source commits it at the end
  bool release_grant = false;       // the source revokes grant_id at url when the transfer ends, any end
};

enum class Verify : std::uint8_t { None, Crc32c };

// Scatter-gather (docs/kv-cache.md): one range of many between the source region and the one target's grant,
// or (count > 1) a strided op: `count` runs of `length` bytes, run k at source_offset + k * source_stride and
// target_offset + k * target_stride, as a column piece of a row-major matrix is (docs/reshard.md). count 1
// is a plain range, its strides unused. A strided op's strides are at least its length: its runs never
// overlap on either side.
struct ScatterOp {
  std::uint64_t source_offset = 0;  // in the local region
  std::uint64_t target_offset = 0;  // in the granted range
  std::uint64_t length = 0;         // of each run
  std::uint64_t count = 1;          // runs
  std::uint64_t source_stride = 0;  // from one run to the next; >= length when count > 1
  std::uint64_t target_stride = 0;

  std::uint64_t bytes() const { return length * count; }  // bounded by the readers (kMaxScatterBytes)
  bool strided() const { return count > 1; }
  // Calls f(source offset, target offset, length) for each run, in order.
  template <typename F>
  void for_each_run(F&& f) const {
    for (std::uint64_t k = 0, s = source_offset, t = target_offset; k < count;
         ++k, s += source_stride, t += target_stride)
      f(s, t, length);
  }
};
inline constexpr std::size_t kMaxScatterOps = 65536;
inline constexpr std::uint64_t kMaxScatterBytes = 16ULL << 30;
// Runs in all (the ops' counts together): what a list costs the executor (one transport op per run at
// most, each holding a copy of the grant's key: ~100 bytes and two allocations), its verify and the overlap
// check, bounded apart from how few ops carry them: 4x what kMaxScatterOps plain ops cost before.
inline constexpr std::uint64_t kMaxScatterRuns = 1ULL << 18;

// POST /v1/transfers. The one type of the body from the controller and the CLI to the agent's run: a Chain
// hop's forwarding transfer is this body again, with its source and targets changed.
struct TransferRequest {
  std::string source_region;
  std::string source_file{};  // instead of source_region: a file under the source agent's data directory
  std::uint64_t offset = 0;   // into the source region (or file)
  std::uint64_t length = 0;   // 0: to the end of the source region
  std::vector<TransferTarget> targets;
  OpKind op = OpKind::Write;  // write: source -> targets; read: the one target -> source
  std::uint64_t chunk_bytes = 1u << 20;
  std::uint32_t window = 16;
  Verify verify = Verify::None;
  std::uint64_t deadline_seconds = 0;      // 0: none
  std::uint64_t max_bytes_per_second = 0;  // per target; 0: unlimited
  // Strategy chain (docs/broadcast.md): the targets are hops in order; the source writes the first, and
  // each later hop is fed by the nearest hop before it that still answers, which forwards what lands on it.
  bool chain = false;
  // A hop forwarding what lands in source_region through this grant of the source agent: each segment is
  // read only once it has landed there (and been verified).
  std::string follow_grant{};
  // Scatter-gather: ranges between source_region and the one target's grant (then no offset or length).
  std::vector<ScatterOp> ops{};
  std::string ns{};          // the job's namespace: the source region must belong to it or be shared with it
  std::string source_pod{};  // the UID of the pod the job addressed: the source region must be its own
  // The named tensors a target holds once this write commits (docs/tensors.md): each target written from
  // its region's offset 0 through a grantId takes it with its new version. Left out, the source agent
  // fills it from a source region that has one when the write is the whole region; a Chain's hops forward
  // it unchanged. Not with ops (a scatter write keeps the target's manifest) or op read.
  std::optional<Manifest> manifest{};

  // Strict, as the agent reads a body: unknown fields, wrong types, zero/oversized values and
  // combinations that cannot run are InvalidArgument naming the field ("targets[1].url: ..."). The grant
  // keys are checked to be objects; what they hold is the data plane's to read.
  static Result<TransferRequest> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// The `ops` array of a body: 1 to kMaxScatterOps objects {sourceOffset, targetOffset, length, count?,
// sourceStride?, targetStride?}, each length >= 1; a count above 1 needs both strides, each >= length; at
// most kMaxScatterRuns runs and kMaxScatterBytes bytes in all. InvalidArgument naming the op
// ("ops[12].length: ...").
Result<std::vector<ScatterOp>> parse_scatter_ops(const nlohmann::json& ops);
// The `opsPacked` string, base64 of one of two layouts, told apart by their length:
//   v1: per op three little-endian uint64 (sourceOffset, targetOffset, length), 24 bytes an op: a multiple
//       of 24 bytes;
//   v2: the 8-byte header "COPS" + little-endian uint32 2, then per op six little-endian uint64
//       (sourceOffset, targetOffset, length, count, sourceStride, targetStride), 48 bytes an op: 8 more
//       than a multiple of 24, so never read as v1.
// A caller holding block tables in arrays (numpy) sends them as they are, and the agent reads 1,000 ops in
// a fraction of the time JSON objects take. Numbered in the order given; the same limits and errors as
// `ops`.
Result<std::vector<ScatterOp>> parse_packed_scatter_ops(const nlohmann::json& packed);
// The inverse: v1 when no op is strided (what every reader of opsPacked takes), else v2; base64.
std::string pack_scatter_ops(std::span<const ScatterOp> ops);
// Every op's limits but its place in a region: length >= 1, a strided op's strides >= its length, and the
// list within kMaxScatterRuns runs and kMaxScatterBytes bytes. InvalidArgument naming "ops[i]".
Status check_scatter_op_limits(std::span<const ScatterOp> ops);

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
  // Which NICs carried the bytes (docs/path.md): set once the transfer ended, by agents that judge it.
  std::optional<TransferPath> path{};

  bool finished() const { return state == "Succeeded" || state == "Failed" || state == "Cancelled"; }
  bool any_staged() const;  // either end of any target ran through host bounce or staging buffers
  static TransferStatus from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

}  // namespace conduit::api
