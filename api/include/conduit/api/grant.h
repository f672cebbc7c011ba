// The bodies of the agent's grant routes (agent/openapi.yaml, components/schemas): what a client sends to
// make, renew and report through a grant (to_json, and the strict from_json the agent reads it with), and
// the Grant and Landed answers (from_json as any reader of a newer agent, Grant's to_json giving back what
// it read). tests/api checks both against the spec.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/api/manifest.h"
#include "conduit/api/transfer.h"
#include "conduit/common/result.h"

namespace conduit::api {

// The strict readers below refuse what the agent would refuse (unknown fields, wrong types, values out of
// the spec's range) as InvalidArgument naming the field ("ttlSeconds: must be 1 to 86400").

// POST /v1/regions/{name}/grants: CreateGrant {offset, length, access, ttlSeconds, provider, save: {file},
// writer, peer, namespace, pod}.
struct GrantRequest {
  std::uint64_t offset = 0;
  std::optional<std::uint64_t> length{};  // absent: to the end of the region; never 0
  std::string access = "write";           // "write" | "read": what peers may do to the range
  std::uint64_t ttl_seconds = 600;        // 1 to 86400
  std::string provider{};                 // empty: the agent's primary transport (left out of the body)
  std::string save{};    // a file the target writes verified bytes to as they land; empty: none
  std::string writer{};  // who writes: the region's updatedBy once a write commits; empty: left out
  std::string peer{};    // the node whose agent uses the grant (docs/security.md); empty: any agent's
  std::string ns{};      // the job's namespace: the region must belong to it or be shared with it
  std::string pod{};     // the UID of the pod the job addressed (podSelector): the region must be its own
  static Result<GrantRequest> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// POST /v1/grants: a grant with no region, whose bytes pass through a ring of the agent's --pipeline-bytes
// into `save` (a file target). CreateRingGrant {ttlSeconds, provider, save: {file, bytes}, peer, namespace}.
struct RingGrantRequest {
  std::string save;         // the file
  std::uint64_t bytes = 0;  // the size it will have: the whole stream
  std::uint64_t ttl_seconds = 600;
  std::string provider{};
  std::string peer{};  // as GrantRequest's
  std::string ns{};    // the job's namespace: with --namespace-files the file must be under "<ns>/"
  static Result<RingGrantRequest> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// POST /v1/grants/{id}/renew {ttlSeconds}: the grant now expires that long from now.
struct RenewGrant {
  std::uint64_t ttl_seconds = 600;
  static Result<RenewGrant> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// POST /v1/grants/{id}/landed {offset, length, slice, crc32c, waitForPrevious}: the writer's report that a
// segment of the grant's stream has landed, with the CRC32C of each slice as the source read it (empty: not
// verified). wait_for_previous: the writer's report before this one is still out, so a save that finds a
// gap before these bytes waits for it (a while) instead of refusing them.
struct LandedReport {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t slice = 0;  // bytes per CRC32C; 0: absent, as it must be without crc32c
  std::vector<std::uint32_t> crc32c{};
  bool wait_for_previous = false;
  static Result<LandedReport> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// The answer: the slices whose CRC32C differs at the target (indices into the report's), and whether the
// bytes went to the grant's save file.
struct Landed {
  std::vector<std::uint64_t> mismatched;
  bool saved = false;
  static Result<Landed> from_json(const nlohmann::json& body);
};

// POST /v1/grants/{id}/commit: CommitRequest {bytes, manifest, version}, every byte of the write landed;
// the region gets a new version, and the manifest (checked against the grant's region) becomes the region's
// with it. A grant that took landing reports commits what they reported, once; a plain write grant (no
// reports: a scatter batch's, a CUDA region's) commits on its holder's word, each time it is asked.
// `version`: the version the region must reach by this commit, refused (Conflict, naming the region's
// version now) unless the region is at version - 1: an orchestrator moving several regions to step K
// together commits each only once every region has every byte (docs/tensors.md, "Versions").
struct CommitRequest {
  std::uint64_t bytes = 0;
  std::optional<Manifest> manifest{};
  std::optional<std::uint64_t> version{};  // >= 1
  static Result<CommitRequest> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// POST /v1/grants/{id}/checksum: GrantChecksumRequest {rangesPacked}, one CRC32C over these ranges of the
// granted range in the order given (their bytes end to end): what the source of a verified scatter-gather
// transfer compares with the sum of its own ranges (docs/kv-cache.md). rangesPacked, base64 of one of two
// layouts told apart by their length:
//   v1: little-endian uint64 pairs (offset into the granted range, length), 16 bytes a range;
//   v2: the 8-byte header "CRNG" + little-endian uint32 2, then four little-endian uint64 a range (offset,
//       length, count, stride: `count` runs of `length` bytes `stride` apart, a strided op's target side),
//       32 bytes a range: 8 past a multiple of 16, so never read as v1.
// 1 to kMaxScatterOps ranges, each at least 1 byte, a stride >= the length where count > 1,
// kMaxScatterRuns runs and kMaxScatterBytes in all. Whether they lie in the grant is the agent's to say.
struct GrantChecksumRequest {
  struct Range {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;  // of each run
    std::uint64_t count = 1;
    std::uint64_t stride = 0;  // >= length when count > 1
  };
  std::vector<Range> ranges;
  static Result<GrantChecksumRequest> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;  // v1 when no range has a count above 1
};

// Its answer {grant, ranges, bytes, crc32c}: the grant, how many ranges and bytes were summed, the sum.
struct GrantChecksum {
  std::string grant;
  std::uint64_t ranges = 0;
  std::uint64_t bytes = 0;
  std::uint32_t crc32c = 0;
  static Result<GrantChecksum> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// Grant, as POST /v1/regions/{name}/grants and POST /v1/grants answer it.
struct Grant {
  std::string id;
  nlohmann::json key;    // the RemoteKey, handed to the source agent as it came
  std::string provider;  // "tcp;ofi_rxm", "efa", ...
  std::string region{};
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string access{};
  std::string expires_at{};  // RFC 3339
  std::string gpu_path{};    // none, dmabuf, peermem, staged; "" from an agent that does not say
  std::vector<std::string> nics{};
  // Landing {ring, streamBytes, savedBytes, committed, file?}, as it came; null when the grant takes no
  // landing reports (a read grant, CUDA memory).
  nlohmann::json landing{};
  double registration_seconds = 0;  // what registering the range took on the target
  std::string peer{};               // the node whose agent may use it; "" any agent's
  std::string ns{};                 // the namespace of the job it was made for; "" an operator's
  bool takes_reports() const { return landing.is_object(); }
  bool ring() const { return takes_reports() && landing.value("ring", false); }
  std::string save_file() const;  // "" when it saves none
  static Grant from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

}  // namespace conduit::api
