// The bodies of the agent's region, grant, checksum and staging routes (agent/openapi.yaml, components/
// schemas) as the callers use them. Requests have to_json (what a client sends); answers have from_json,
// lenient like any reader of a newer agent (a missing field reads as its default), and to_json, which gives
// back what from_json read (the CLI's --json prints it). tests/api checks both against the spec.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::api {

// POST /v1/regions, allocating: AllocateRegion {name, bytes, memory}.
struct CreateRegion {
  std::string name;
  std::uint64_t bytes = 0;
  std::string memory = "host";  // "host" | "cuda:N"
  std::string ns{};             // the namespace it belongs to (docs/security.md, "Tenancy"); "": none
  nlohmann::json to_json() const;
};

// POST /v1/regions, loading a file under the agent's data directory: LoadRegion {name, file, mode: load}.
struct LoadRegion {
  std::string name;
  std::string file;
  std::string ns{};  // as CreateRegion's
  nlohmann::json to_json() const;
};

// The tenancy rule, one for the agent that enforces it and the controller that checks it first
// (docs/security.md, "Tenancy"): a job of namespace `job_ns` ("" = an operator's own request) may use a
// region of namespace `ns` ("" = none, anyone's) shared with `shared_with` ("*" = every namespace).
bool namespace_admits(const std::string& ns, const std::vector<std::string>& shared_with,
                      const std::string& job_ns);
// The rule of pods' regions (docs/pods.md), for the agent that enforces it and the controller that checks it
// first: a region shared by pod `owner_pod` ("" = by none) is reached by a job of namespace `job_ns` only
// when the job addressed that pod (`pod`, its UID), and a job addressing a pod reaches only that pod's
// regions. A request of no job (job_ns "") addressing no pod is an operator's and passes.
bool pod_admits(const std::string& owner_pod, const std::string& job_ns, const std::string& pod);

// Region, as POST /v1/regions and GET /v1/regions[/{name}] answer it.
struct Region {
  std::string name;
  std::uint64_t bytes = 0;
  std::string memory;       // "host", "cuda:0", ...
  std::string source{};     // "allocated", "file:<path>", "imported"
  std::uint64_t users = 0;  // transfers and grants using it
  bool huge_pages = false;
  std::string created_at{};   // RFC 3339, as the agent wrote it
  nlohmann::json rails = {};  // per transport, the rails it is registered on; null when the agent says none
  std::uint64_t version = 0;  // one more per write that committed every byte into it
  std::string updated_by{};   // the writer of that version
  std::string updated_at{};   // RFC 3339; empty at version 0
  std::string ns{};           // the namespace it belongs to; "": none, anyone's
  std::vector<std::string> shared_with{};  // namespaces let in besides ns ("*": all)
  // Shared over the import socket: {pid, uid, podUID?} of the process, as the kernel said; null otherwise.
  nlohmann::json imported_by{};
  // Whether a job of namespace `job_ns` may use it (namespace_admits).
  bool admits(const std::string& job_ns) const { return namespace_admits(ns, shared_with, job_ns); }
  static Region from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// RegionList {items}.
std::vector<Region> regions_from_json(const nlohmann::json& body);
nlohmann::json regions_to_json(const std::vector<Region>& regions);

// POST /v1/regions/{name}/save: SaveRegion {file, namespace?}.
struct SaveRegion {
  std::string file;
  std::string ns{};  // the job's namespace: with --namespace-files the file must be under "<ns>/"
  nlohmann::json to_json() const;
};

// SaveResult {region, file, bytes}: the file is complete under its final name.
struct SaveResult {
  std::string region;
  std::string file;
  std::uint64_t bytes = 0;
  static SaveResult from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// GET /v1/regions/{name}/checksum?offset=&length=&slice=
struct ChecksumQuery {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // 0: to the end of the region
  std::uint64_t slice = 1u << 20;
  std::string query_string() const;  // "offset=0&length=0&slice=1048576"
};

// Checksum {region, offset, length, slice, crc32c}: one CRC32C per slice, the last possibly shorter.
struct Checksum {
  std::string region;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t slice = 0;
  std::vector<std::uint32_t> crc32c;
  // Strict about crc32c, whose values are compared: InvalidArgument saying why when it is not an array of
  // 32-bit unsigned integers.
  static Result<Checksum> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// POST /v1/regions/{name}/staging: StagingRequest {offset, length, direction: toDevice | toHost}.
struct StagingRequest {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool to_device = true;
  nlohmann::json to_json() const;
};

// POST /v1/regions/{name}/grants: CreateGrant {offset, length, access, ttlSeconds, provider}.
struct GrantRequest {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string access = "write";  // "write" | "read": what peers may do to the range
  std::uint64_t ttl_seconds = 600;
  std::string provider{};  // empty: the agent's primary transport (left out of the body)
  std::string save{};      // a file the target writes verified bytes to as they land; empty: none
  std::string writer{};    // who writes: the region's updatedBy once a write commits; empty: left out
  std::string peer{};      // the node whose agent uses the grant (docs/security.md); empty: any agent's
  std::string ns{};        // the job's namespace: the region must belong to it or be shared with it
  std::string pod{};       // the UID of the pod the job addressed (podSelector): the region must be its own
  nlohmann::json to_json() const;
};

// POST /v1/grants: a grant with no region, whose bytes pass through a ring of the agent's --pipeline-bytes
// into `save` (a file target). {ttlSeconds, provider, save: {file, bytes}}.
struct RingGrantRequest {
  std::string save;         // the file
  std::uint64_t bytes = 0;  // the size it will have: the whole stream
  std::uint64_t ttl_seconds = 600;
  std::string provider{};
  std::string peer{};  // as GrantRequest's
  std::string ns{};    // as SaveRegion's
  nlohmann::json to_json() const;
};

// POST /v1/grants/{id}/landed {offset, length, slice, crc32c, waitForPrevious}: the writer's report that a
// segment of the grant's stream has landed, with the CRC32C of each slice as the source read it (empty: not
// verified). wait_for_previous: the writer's report before this one is still out, so a save that finds a
// gap before these bytes waits for it (a while) instead of refusing them.
struct LandedReport {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t slice = 0;
  std::vector<std::uint32_t> crc32c{};
  bool wait_for_previous = false;
  nlohmann::json to_json() const;
};

// The answer: the slices whose CRC32C differs at the target (indices into the report's), and whether the
// bytes went to the grant's save file.
struct Landed {
  std::vector<std::uint64_t> mismatched;
  bool saved = false;
  static Result<Landed> from_json(const nlohmann::json& body);
};

// POST /v1/files/stat {path}: a file under the agent's data directory.
struct FileInfo {
  std::string path;
  std::uint64_t bytes = 0;
  static FileInfo from_json(const nlohmann::json& body);
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
