// The query strings and path ids of the REST API turned into typed requests; the bodies are api/'s
// (conduit/api/wire.h, grant.h, transfer.h), read by their strict from_json. Strict on purpose: an unknown
// parameter or a value that is not a number is InvalidArgument naming it, so a typo in a client fails loudly
// instead of silently taking a default.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "conduit/api/wire.h"
#include "conduit/common/result.h"

namespace conduit::agent::rest {

// GET /v1/regions/{name}/checksum?offset=&length=&slice= (what api::ChecksumQuery::query_string writes).
Result<api::ChecksumQuery> parse_checksum_query(const httplib::Params& params);

// GET /v1/regions/{name}/version?after=&timeoutSeconds=: answers once the version is past `after`, or after
// `timeout` (at most 60 s) with the version as it is.
struct VersionQuery {
  std::uint64_t after = 0;
  std::chrono::seconds timeout{0};
};
Result<VersionQuery> parse_version_query(const httplib::Params& params);

// GET /v1/regions/{name}/acks?version=&readers=&timeoutSeconds=: answers once at least `readers` readers
// acked a version >= `version`, or after `timeout` (at most 60 s) with the acks as they are. `readers` is
// at most RegionAcks::kMaxReaders (more could never be done).
struct AcksQuery {
  std::uint64_t version = 0;
  std::uint64_t readers = 1;
  std::chrono::seconds timeout{0};
};
Result<AcksQuery> parse_acks_query(const httplib::Params& params);

// The one query parameter `name` of a route that waits, in seconds (at most 60; absent: 0, no wait):
// ?waitSeconds= of POST /v1/transfers and GET /v1/transfers/{id}, ?timeoutSeconds= of GET
// /v1/regions/{name} (wait for the region to be made). `namespace_too`: the route also takes ?namespace=
// (checked by the router: Call::ns).
Result<std::chrono::seconds> parse_seconds_query(const httplib::Params& params, const std::string& name,
                                                 bool namespace_too = false);

// Grant and transfer ids in paths: short, printable, no separators.
Status validate_id(const std::string& id);

}  // namespace conduit::agent::rest
