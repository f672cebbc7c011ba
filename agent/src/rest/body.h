// Request bodies: bounded before they are read, and JSON objects before any route parses them.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace conduit::agent::rest {

// 411 (and Handled) for a chunked body, or a POST, PUT or PATCH without a Content-Length. cpp-httplib 0.11
// bounds a body only by its Content-Length: such a body (read until the connection closes) went into memory
// whole before any check (300 MiB did, tests/hostile). JSON bodies always come with a length, so neither is
// accepted; the body is left unread and the connection closed.
httplib::Server::HandlerResponse refuse_unbounded_body(const httplib::Request& req, httplib::Response& res);

// The one route whose body may be larger than --max-body-bytes: POST /v1/reshard/plans carries every rank's
// manifest, and 64 + 32 ranks of a 1,000-tensor model with placements are ~20 MB of JSON
// (bench/reshard_plan_bench). Bounded all the same: parsed, JSON takes several times its size in memory.
//
// httplib has one limit for every route, checked by the Content-Length before it reads a body; past it, it
// reads the body to drop it and answers 413, so the client sees the answer. That limit is this route's, and
// every other route's own (--max-body-bytes) is checked on the body read (read_json_body): a caller who got
// past authentication may make the agent hold up to this much for any route before the 413. Refusing earlier,
// in the pre-routing handler, would leave the body unread and the connection reset under the client's feet.
inline constexpr std::string_view kReshardPlansPath = "/v1/reshard/plans";
inline constexpr std::size_t kReshardPlanBodyBytes = 32 << 20;

// The largest body `req` may carry: `max_body_bytes` (--max-body-bytes), or for the reshard plans route the
// larger of that and kReshardPlanBodyBytes.
std::size_t body_limit(std::size_t max_body_bytes, const httplib::Request& req);

// The body as a JSON object, or nullopt after answering: Content-Type (415), then size (413), then JSON
// syntax (400), then "is an object" (400); the first failure answers.
std::optional<nlohmann::json> read_json_body(std::size_t max_bytes, const httplib::Request& req,
                                             httplib::Response& res);

}  // namespace conduit::agent::rest
