// The bodies of the agent's region, file, checksum and staging routes (agent/openapi.yaml, components/
// schemas; the grant routes' are in grant.h, the transfer routes' in transfer.h). Requests have to_json (what
// a client sends) and a strict from_json (how the agent reads them: unknown fields, wrong types and values
// out of the spec's range are InvalidArgument naming the field, "bytes: must be positive"). Answers have
// from_json, lenient like any reader of a newer agent (a missing field reads as its default), and to_json,
// which gives back what from_json read (the CLI's --json prints it). tests/api checks both against the spec.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "conduit/api/manifest.h"
#include "conduit/common/result.h"

namespace conduit::api {

// POST /v1/regions, allocating: AllocateRegion {name, bytes, memory, namespace, sharedWith, manifest,
// shareable}.
struct CreateRegion {
  std::string name;
  std::uint64_t bytes = 0;
  std::string memory = "host";  // "host" | "cuda:N"
  std::string ns{};             // the namespace it belongs to (docs/security.md, "Tenancy"); "": none
  std::vector<std::string> shared_with{};  // namespaces let in besides ns ("*": all)
  std::optional<Manifest> manifest{};      // the named tensors it will hold, checked against bytes
  // Host memory in a memfd that local processes may map (opened over the import socket); not with cuda:N.
  bool shareable = false;
  // A body that loads a file is InvalidArgument here (region_request_from_json reads either).
  static Result<CreateRegion> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// POST /v1/regions, loading a file under the agent's data directory: LoadRegion {name, file, mode: load,
// namespace, sharedWith}. A file named *.safetensors is read as one: the region is its data section and
// its header the region's manifest.
struct LoadRegion {
  std::string name;
  std::string file;
  std::string ns{};                        // as CreateRegion's
  std::vector<std::string> shared_with{};  // as CreateRegion's
  // A body that allocates is InvalidArgument here (region_request_from_json reads either).
  static Result<LoadRegion> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// The body of POST /v1/regions is one of the two (the spec's oneOf): bytes allocates, file loads; a body
// with both or neither is InvalidArgument.
using RegionRequest = std::variant<CreateRegion, LoadRegion>;
Result<RegionRequest> region_request_from_json(const nlohmann::json& body);

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
  std::optional<std::uint64_t> tensors{};  // how many tensors its manifest names; nullopt: it has none
  bool shareable = false;  // backed by a memfd a local process may map (over the import socket)
  // Whether a job of namespace `job_ns` may use it (namespace_admits).
  bool admits(const std::string& job_ns) const { return namespace_admits(ns, shared_with, job_ns); }
  static Region from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// RegionList {items}.
std::vector<Region> regions_from_json(const nlohmann::json& body);
nlohmann::json regions_to_json(const std::vector<Region>& regions);

// POST /v1/regions/{name}/save: SaveRegion {file, namespace}.
struct SaveRegion {
  std::string file;
  std::string ns{};  // the job's namespace: with --namespace-files the file must be under "<ns>/"
  static Result<SaveRegion> from_json(const nlohmann::json& body);
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

// POST /v1/files/stat: StatFile {path, namespace}, a file under the agent's data directory.
struct StatFile {
  std::string path;
  std::string ns{};  // as SaveRegion's
  static Result<StatFile> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// FileInfo {path, bytes}, the answer.
struct FileInfo {
  std::string path;
  std::uint64_t bytes = 0;
  static FileInfo from_json(const nlohmann::json& body);
};

// GET /v1/regions/{name}/checksum?offset=&length=&slice=. The agent reads the query string with its other
// query strings (rest/requests.h), in their words.
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
  static Result<StagingRequest> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// POST /v1/regions/{name}/acks: Ack {reader, version}, a reader saying it applied version `version` of the
// region (docs/python.md, "Acknowledgements").
struct Ack {
  std::string reader;  // free text of 1..253 characters: "host/pid", a rank's name
  std::uint64_t version = 0;
  static Result<Ack> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// One reader's latest ack, as Acks lists it: {reader, version, at}.
struct AckedReader {
  std::string reader;
  std::uint64_t version = 0;
  std::string at;  // RFC 3339, as the agent wrote it
};

// Acks {region, version, readers, done}: the answer of both acks routes. `done`: at least the asked number
// of readers acked a version >= `version` (POST answers with the version acked and done true).
struct Acks {
  std::string region;
  std::uint64_t version = 0;
  std::vector<AckedReader> readers;
  bool done = false;
  static Acks from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

}  // namespace conduit::api
