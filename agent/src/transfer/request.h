// What a caller asks of a transfer, as the agent holds it once read and admitted (request.cpp reads the
// wire body; rest/transfer_routes.cpp admits it): the source, the targets and their grants, and how to move
// the bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/transport.h"
#include "transfer/scatter.h"
#include "transfer/stream/landing.h"

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

}  // namespace conduit::agent
