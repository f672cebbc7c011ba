// Request bodies and query strings of the REST API turned into typed requests. Strict on purpose: an unknown
// field, a wrong type or an out-of-range value is InvalidArgument naming the field, so a typo in a client
// fails loudly instead of silently taking a default.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/transport.h"
#include "tenancy.h"

namespace conduit::agent::rest {

// POST /v1/regions: either {name, bytes, memory?} or {name, file, mode?: "load"}.
struct CreateRegionRequest {
  std::string name;
  std::uint64_t bytes = 0;          // set when allocating
  std::string memory = "host";      // "host" | "cuda:N"
  std::optional<std::string> file;  // set when loading
  Tenancy tenancy;                  // namespace, sharedWith
};
Result<CreateRegionRequest> parse_create_region(const nlohmann::json& body);

// A file named by a request, with the namespace of the job asking (tenancy.h, file_refusal).
struct FileRequest {
  std::string file;
  std::string job_namespace;  // "" = an operator's own
};

// POST /v1/regions/{name}/save: {file, namespace?}.
Result<FileRequest> parse_save_region(const nlohmann::json& body);

// POST /v1/regions/{name}/grants: {offset?, length?, access, ttlSeconds?, provider?, save?: {file}, writer?}.
// POST /v1/grants (a ring in front of a file, no region): {ttlSeconds?, provider?, save: {file, bytes}}.
struct CreateGrantRequest {
  std::uint64_t offset = 0;
  std::optional<std::uint64_t> length;  // absent = the rest of the region
  Access access = Access::RemoteWrite;
  std::chrono::seconds ttl{600};
  std::string provider;             // "" = the agent's primary transport
  std::optional<std::string> save;  // the file verified bytes are written to as they land
  std::uint64_t save_bytes = 0;     // ring grants: the size the file will have
  std::string writer;               // who writes through it: the region's updatedBy once a write commits
  std::string peer;                 // the node whose agent uses it (Grant::peer); "" = any agent
  std::string job_namespace;        // the job's namespace: the region must admit it (tenancy.h)
  std::string pod;                  // the pod the job addressed: the region must be one it shared
};
Result<CreateGrantRequest> parse_create_grant(const nlohmann::json& body);
Result<CreateGrantRequest> parse_create_ring_grant(const nlohmann::json& body);

// POST /v1/grants/{id}/renew: {ttlSeconds} (1 .. 86400).
Result<std::chrono::seconds> parse_renew_grant(const nlohmann::json& body);

// POST /v1/grants/{id}/landed: {offset, length, slice?, crc32c?: [uint32...]}.
struct LandedRequest {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t slice = 0;
  std::vector<std::uint32_t> crc32c;
  bool wait_for_previous = false;
};
Result<LandedRequest> parse_landed(const nlohmann::json& body);

// POST /v1/files/stat: {path, namespace?}.
Result<FileRequest> parse_stat_file(const nlohmann::json& body);

// POST /v1/grants/{id}/commit: {bytes}.
Result<std::uint64_t> parse_commit(const nlohmann::json& body);

// POST /v1/regions/{name}/staging: {offset, length, direction: "toDevice" | "toHost"}.
struct StagingRequest {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool to_device = true;
};
Result<StagingRequest> parse_staging(const nlohmann::json& body);

// GET /v1/regions/{name}/checksum?offset=&length=&slice=
struct ChecksumQuery {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // 0 = to the end of the region
  std::uint64_t slice = 1u << 20;
};
Result<ChecksumQuery> parse_checksum_query(const httplib::Params& params);

// GET /v1/regions/{name}/version?after=&timeoutSeconds=: answers once the version is past `after`, or after
// `timeout` (at most 60 s) with the version as it is.
struct VersionQuery {
  std::uint64_t after = 0;
  std::chrono::seconds timeout{0};
};
Result<VersionQuery> parse_version_query(const httplib::Params& params);

// ?waitSeconds= of POST /v1/transfers and GET /v1/transfers/{id} (at most 60; absent: 0, no wait).
// `namespace_too`: the route also takes ?namespace= (checked by the router: Call::ns).
Result<std::chrono::seconds> parse_wait_query(const httplib::Params& params, bool namespace_too = false);

// Grant and transfer ids in paths: short, printable, no separators.
Status validate_id(const std::string& id);

}  // namespace conduit::agent::rest
